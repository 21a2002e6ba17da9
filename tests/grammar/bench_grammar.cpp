// bench_grammar MODEL SCHEMA.json... [--steps N] [--seed S]: the mask cost of a decode step
// against the step itself, on a real container. The vocabulary is the container's tokenizer when
// it has one of the model's vocab_size; otherwise (kl8v.waste: 163,840 logits, no tokenizer) a
// deterministic synthetic one of that size shaped like a BPE vocabulary (bytes, digit runs,
// punctuation runs, words with and without a leading space, CJK). For each schema: generate
// with temperature 1 under the mask (a fresh match whenever one finishes; the token-set cache
// stays warm across them, as in a server), timing mask_logits and the forward step separately.
// Prints one line per schema: steps, mean mask ms, mean step ms, mask share of (mask + step),
// the first mask (cold cache) and the cache size. Figures go to docs/PERFORMANCE.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/api/engine.hpp"
#include "compute/sampling/grammar/grammar.hpp"
#include "compute/sampling/sampler.hpp"
#include "compute/tokenizer/tokenizer.hpp"

using namespace waste;

namespace {

// A BPE-shaped vocabulary of n tokens (ids 0..n-1; the eos id is left as an ordinary slot the
// caller marks). Deterministic: splitmix64 from a fixed seed.
std::vector<std::string> synthetic_vocabulary(int n) {
  std::uint64_t state = 0x5eed;
  auto next = [&] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  auto add = [&](std::string t) {
    if (int(out.size()) < n && seen.insert(t).second) out.push_back(std::move(t));
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, char(b)));
  for (int v = 0; v < 1000; ++v) {
    add(std::to_string(v));
    if (v < 100) add(std::string(v < 10 ? "00" : "0") + std::to_string(v));
  }
  const std::string punct = "{}[]\":,. _-'\n\t()";
  for (char a : punct) {
    for (char b : punct) {
      add(std::string{a, b});
      for (char c : punct) add(std::string{a, b, c});
    }
  }
  for (int k = 2; k <= 16; ++k) add(std::string(std::size_t(k), ' '));
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  while (int(out.size()) < n) {
    const std::uint64_t r = next();
    if (r % 5 == 0) {
      // One or two CJK characters (U+4E00..U+9FFF), three bytes each.
      std::string t;
      for (int k = 0; k < 1 + int((r >> 8) % 2); ++k) {
        const std::uint32_t cp = 0x4E00 + std::uint32_t(next() % 0x5200);
        t += char(0xE0 | (cp >> 12));
        t += char(0x80 | ((cp >> 6) & 0x3F));
        t += char(0x80 | (cp & 0x3F));
      }
      add(std::move(t));
      continue;
    }
    std::string t = (r >> 4) % 2 ? " " : "";
    const int len = 2 + int((r >> 8) % 9);
    for (int k = 0; k < len; ++k) {
      // Skewed towards frequent letters.
      const std::uint64_t x = next() % 676;
      t += letters[std::size_t(x % 26 <= x / 26 ? x % 26 : x / 26)];
    }
    if ((r >> 16) % 7 == 0) t[t[0] == ' ' ? 1 : 0] = char(std::toupper(static_cast<unsigned char>(t[t[0] == ' ' ? 1 : 0])));
    add(std::move(t));
  }
  return out;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_grammar MODEL|--mask-only=VOCAB SCHEMA.json... [--steps N] [--seed S]\n");
    return 2;
  }
  std::vector<std::string> schemas;
  int steps = 64;
  std::uint64_t seed = 1;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      schemas.emplace_back(argv[i]);
    }
  }
  // --mask-only=VOCAB: no model; random logits stand in for the forward step (mask cost alone).
  const bool mask_only = !std::strncmp(argv[1], "--mask-only=", 12);
  EngineOptions options;
  options.model = argv[1];
  options.cache_records = 1u << 14;
  options.ctx_tokens = 4096;
  Result<std::unique_ptr<Engine>> engine = make_error(Errc::argument, "mask only");
  int vocab = 0, eos = 0;
  if (mask_only) {
    vocab = std::atoi(argv[1] + 12);
    eos = vocab - 1;
  } else {
    engine = Engine::open(options);
    if (!engine) return std::fprintf(stderr, "bench_grammar: %s\n", engine.error().message.c_str()), 1;
    vocab = (*engine)->config().vocab;
    eos = (*engine)->config().eos_token_id > 0 ? (*engine)->config().eos_token_id : vocab - 1;
  }
  auto tok = mask_only ? Result<Tokenizer>(make_error(Errc::argument, "mask only")) : Tokenizer::load(argv[1]);
  const bool real = tok && tok->vocab() == vocab;
  const auto t_index = std::chrono::steady_clock::now();
  Result<std::shared_ptr<const grammar::TokenIndex>> index = make_error(Errc::argument, "unset");
  std::vector<int> prompt;
  if (real) {
    tok->set_eos(eos);
    index = grammar::build_token_index(*tok);
    prompt = tok->encode("Reply with JSON:");
  } else {
    index = grammar::build_token_index(synthetic_vocabulary(vocab), {}, {eos});
    prompt = {1, 2, 3, 4};
  }
  if (!index) return std::fprintf(stderr, "bench_grammar: %s\n", index.error().message.c_str()), 1;
  std::printf("vocabulary %d (%s), token index %.1f ms\n", vocab, real ? "the container's tokenizer" : "synthetic",
              since(t_index) * 1e3);

  for (const std::string& path : schemas) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    auto g = grammar::compile_json_schema(nlohmann::json::parse(text.str()));
    if (!g) return std::fprintf(stderr, "bench_grammar: %s: %s\n", path.c_str(), g.error().message.c_str()), 1;
    std::uint64_t noise = seed;
    auto random_logits = [&](std::vector<float>& l) {
      l.resize(std::size_t(vocab));
      for (float& x : l) {
        noise = noise * 6364136223846793005ULL + 1442695040888963407ULL;
        x = float(noise >> 40) / float(1 << 24) * 8.0f;
      }
    };
    std::vector<float> logits;
    if (mask_only) {
      random_logits(logits);
    } else {
      (*engine)->reset();
      auto fed = (*engine)->eval(prompt);
      if (!fed) return std::fprintf(stderr, "bench_grammar: %s\n", fed.error().message.c_str()), 1;
      logits.assign(fed->begin(), fed->end());
    }
    std::vector<double> masks;
    SamplingParams sp;
    sp.temperature = 1;
    sp.seed = seed;
    Sampler sampler(sp);
    auto matcher = std::make_unique<grammar::Matcher>(*g, *index);
    double mask_s = 0, step_s = 0, first_mask_s = -1;
    int done = 0, matches = 0;
    for (int s = 0; s < steps; ++s) {
      if (matcher->finished()) {
        matcher = std::make_unique<grammar::Matcher>(*g, *index);
        ++matches;
      }
      const auto t0 = std::chrono::steady_clock::now();
      matcher->mask_logits(logits);
      const double m = since(t0);
      if (first_mask_s < 0) first_mask_s = m;
      mask_s += m;
      masks.push_back(m);
      int next = sampler.sample(logits);
      if (!matcher->accept_token(next)) return std::fprintf(stderr, "bench_grammar: mask let a bad token through\n"), 1;
      if (next == eos) {
        matcher = std::make_unique<grammar::Matcher>(*g, *index);
        ++matches;
      }
      if (mask_only) {
        random_logits(logits);
        ++done;
        continue;
      }
      if ((*engine)->position() + 1 >= options.ctx_tokens) break;
      const auto t1 = std::chrono::steady_clock::now();
      const int one[1] = {next};
      auto out = (*engine)->eval(one);
      step_s += since(t1);
      if (!out) return std::fprintf(stderr, "bench_grammar: %s\n", out.error().message.c_str()), 1;
      logits.assign(out->begin(), out->end());
      ++done;
    }
    const double mask_ms = mask_s / done * 1e3, step_ms = step_s / done * 1e3;
    std::sort(masks.begin(), masks.end());
    const double median_ms = masks[masks.size() / 2] * 1e3, p90_ms = masks[masks.size() * 9 / 10] * 1e3;
    std::printf("%s: %d steps (%d matches finished), mask mean %.3f ms (median %.3f, p90 %.3f, first %.1f), "
                "step %.1f ms, mask share %.2f%%\n",
                path.c_str(), done, matches, mask_ms, median_ms, p90_ms, first_mask_s * 1e3, step_ms,
                step_ms > 0 ? 100.0 * mask_ms / (mask_ms + step_ms) : 100.0);
  }
  return 0;
}
