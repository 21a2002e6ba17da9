// bench_grammar MODEL SCHEMA.json... [--steps N] [--seed S]: the mask cost of a decode step
// against the step itself, on a real container and its tokenizer. For each schema: generate
// with temperature 1 under the mask (a fresh match whenever one finishes; the token-set cache
// stays warm across them, as in a server), timing mask_logits and the forward step separately.
// Prints one line per schema: steps, mean mask ms, mean step ms, mask share of (mask + step),
// the first mask (cold cache) and the cache size. Figures go to docs/PERFORMANCE.md.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/api/engine.hpp"
#include "compute/sampling/grammar/grammar.hpp"
#include "compute/sampling/sampler.hpp"
#include "compute/tokenizer/tokenizer.hpp"

using namespace waste;

namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_grammar MODEL SCHEMA.json... [--steps N] [--seed S]\n");
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
  EngineOptions options;
  options.model = argv[1];
  options.cache_records = 1u << 14;
  options.ctx_tokens = 4096;
  auto engine = Engine::open(options);
  if (!engine) return std::fprintf(stderr, "bench_grammar: %s\n", engine.error().message.c_str()), 1;
  auto tok = Tokenizer::load(argv[1]);
  if (!tok) return std::fprintf(stderr, "bench_grammar: %s\n", tok.error().message.c_str()), 1;
  if ((*engine)->config().eos_token_id > 0) tok->set_eos((*engine)->config().eos_token_id);
  const auto t_index = std::chrono::steady_clock::now();
  auto index = grammar::build_token_index(*tok);
  if (!index) return std::fprintf(stderr, "bench_grammar: %s\n", index.error().message.c_str()), 1;
  std::printf("vocabulary %d, token index %.1f ms\n", tok->vocab(), since(t_index) * 1e3);
  const std::vector<int> prompt = tok->encode("Reply with JSON:");

  for (const std::string& path : schemas) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    auto g = grammar::compile_json_schema(nlohmann::json::parse(text.str()));
    if (!g) return std::fprintf(stderr, "bench_grammar: %s: %s\n", path.c_str(), g.error().message.c_str()), 1;
    (*engine)->reset();
    auto fed = (*engine)->eval(prompt);
    if (!fed) return std::fprintf(stderr, "bench_grammar: %s\n", fed.error().message.c_str()), 1;
    std::vector<float> logits(fed->begin(), fed->end());
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
      int next = sampler.sample(logits);
      if (!matcher->accept_token(next)) return std::fprintf(stderr, "bench_grammar: mask let a bad token through\n"), 1;
      if (next == tok->eos()) {
        matcher = std::make_unique<grammar::Matcher>(*g, *index);
        ++matches;
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
    std::printf("%s: %d steps (%d matches finished), mask %.3f ms/step, step %.1f ms, mask share %.2f%%, first mask %.1f ms\n",
                path.c_str(), done, matches, mask_ms, step_ms, 100.0 * mask_ms / (mask_ms + step_ms), first_mask_s * 1e3);
  }
  return 0;
}
