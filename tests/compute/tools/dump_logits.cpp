// waste-dump-logits MODEL OUT.bin --prompt 1,2,... --decode N [--threads T]
// Feeds the prompt one token at a time, then N greedy tokens (argmax of the previous step's
// logits, ties to the lowest id), and writes the logits after every fed token for the PyTorch
// oracle diff. File: int32 n_steps, int32 vocab, then per step {int32 token_fed; f32 logits[vocab]}.
// --chunk N (prefill path, docs/QUALITY.md): the prompt goes in eval calls of N tokens (the first
// of --first-chunk K), one step per call with its last token, so each step's logits are the
// chunked prefill's; --decode must then be 0.
// --trace FILE: every fed token's decisions (compute/forward/trace.hpp) as JSON in
// tests/reference/v41_oracle.py's trace format: [{"token", "experts": {"L": ids}, "attended":
// {"L": groups}, "blocks": {"L": blocks}}], for run_diff.py --trace.
// --embeddings FILE: prompt positions fed with an input vector instead of the embedding table's
// row (an image span, as the vision path feeds them: Engine::eval's `embeddings`). File: int32
// n_rows, int32 hidden, then per row {int32 prompt position; f32 vector[hidden]}
// (tests/reference/compare_logits.py read_embeddings).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "compute/api/engine.hpp"
#include "compute/forward/trace.hpp"

namespace {

int argmax(std::span<const float> logits) {
  int best = 0;
  for (int i = 1; i < int(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

template <class T>
void put(std::ofstream& out, T value) {
  out.write(reinterpret_cast<const char*>(&value), sizeof value);
}

// --embeddings' rows by prompt position; an error names the file and what is wrong.
bool read_embeddings(const std::string& path, int hidden, std::size_t prompt_len,
                     std::map<std::size_t, std::vector<float>>& rows, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  std::int32_t n = 0, width = 0;
  if (!in.read(reinterpret_cast<char*>(&n), sizeof n) || !in.read(reinterpret_cast<char*>(&width), sizeof width)) {
    error = path + ": cannot read the header";
    return false;
  }
  if (width != hidden || n < 0) {
    error = path + ": " + std::to_string(n) + " rows of width " + std::to_string(width) + ", the model's hidden is " +
            std::to_string(hidden);
    return false;
  }
  for (std::int32_t i = 0; i < n; ++i) {
    std::int32_t pos = 0;
    std::vector<float> row(static_cast<std::size_t>(hidden));
    if (!in.read(reinterpret_cast<char*>(&pos), sizeof pos) ||
        !in.read(reinterpret_cast<char*>(row.data()), std::streamsize(row.size() * sizeof(float)))) {
      error = path + ": row " + std::to_string(i) + " is cut short";
      return false;
    }
    if (pos < 0 || std::size_t(pos) >= prompt_len || rows.count(std::size_t(pos)) != 0) {
      error = path + ": row " + std::to_string(i) + " at position " + std::to_string(pos) +
              " (outside the prompt of " + std::to_string(prompt_len) + " tokens, or given twice)";
      return false;
    }
    rows.emplace(std::size_t(pos), std::move(row));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Dump the logits after every fed token (oracle diff)"};
  std::string model, out_path;
  std::vector<int> prompt;
  int decode = 16, threads = 0, ctx = 4096;
  std::size_t cache_records = 0;
  int chunk = 1, first_chunk = 0;
  app.add_option("model", model, "Container directory")->required();
  app.add_option("out", out_path, "Output file")->required();
  app.add_option("--prompt", prompt, "Prompt token ids, comma separated")->delimiter(',')->required();
  app.add_option("--decode", decode, "Greedy tokens to decode after the prompt")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "Compute threads (0 = all)")->check(CLI::NonNegativeNumber);
  app.add_option("--ctx", ctx, "Context length")->check(CLI::PositiveNumber);
  app.add_option("--cache-records", cache_records, "Expert cache capacity in records");
  app.add_option("--chunk", chunk, "Prompt tokens per eval call (prefill chunks)")->check(CLI::Range(1, 64));
  app.add_option("--first-chunk", first_chunk, "Tokens of the first call (0 = --chunk)")->check(CLI::Range(0, 64));
  std::string trace_path, embeddings_path;
  app.add_option("--trace", trace_path, "Write every fed token's experts, attended groups and blocks here (JSON)");
  app.add_option("--embeddings", embeddings_path, "Input vectors for prompt positions (image spans)");
  CLI11_PARSE(app, argc, argv);
  if (chunk > 1 && decode != 0) {
    std::fprintf(stderr, "waste-dump-logits: --chunk %d needs --decode 0\n", chunk);
    return 1;
  }

  waste::EngineOptions options;
  options.model = model;
  options.threads = threads;
  options.ctx_tokens = ctx;
  options.cache_records = cache_records;
  options.prefill_chunk = 64;
  auto engine = waste::Engine::open(options);
  if (!engine) {
    std::fprintf(stderr, "waste-dump-logits: %s\n", engine.error().message.c_str());
    return 1;
  }
  waste::forward::ForwardTrace trace;
  if (!trace_path.empty()) (*engine)->set_trace(&trace);
  const int vocab = (*engine)->config().vocab;
  std::map<std::size_t, std::vector<float>> rows;
  if (!embeddings_path.empty()) {
    std::string error;
    if (!read_embeddings(embeddings_path, (*engine)->config().hidden, prompt.size(), rows, error)) {
      std::fprintf(stderr, "waste-dump-logits: %s\n", error.c_str());
      return 1;
    }
  }
  // The pointers of tokens [begin, end): empty when none of them has a row.
  auto rows_of = [&](std::size_t begin, std::size_t end) {
    std::vector<const float*> ptrs(end - begin, nullptr);
    bool any = false;
    for (std::size_t i = begin; i < end; ++i) {
      if (auto it = rows.find(i); it != rows.end()) {
        ptrs[i - begin] = it->second.data();
        any = true;
      }
    }
    if (!any) ptrs.clear();
    return ptrs;
  };
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) {
    std::fprintf(stderr, "waste-dump-logits: cannot write %s\n", out_path.c_str());
    return 1;
  }
  if (chunk > 1) {
    std::vector<std::size_t> ends;
    for (std::size_t end = std::size_t(first_chunk > 0 ? first_chunk : chunk);; end += std::size_t(chunk)) {
      ends.push_back(std::min(end, prompt.size()));
      if (end >= prompt.size()) break;
    }
    put(out, std::int32_t(ends.size()));
    put(out, std::int32_t(vocab));
    std::size_t begin = 0;
    for (const std::size_t end : ends) {
      // Prompt tokens, even a piece of one: the prefill path (the per-token rule, expert_batch.hpp).
      const std::vector<const float*> media = rows_of(begin, end);
      auto logits = (*engine)->eval(std::span<const int>(prompt.data() + begin, end - begin), media,
                                    waste::FeedKind::prompt);
      if (!logits) {
        std::fprintf(stderr, "waste-dump-logits: tokens %zu..%zu: %s\n", begin, end, logits.error().message.c_str());
        return 1;
      }
      put(out, std::int32_t(prompt[end - 1]));
      out.write(reinterpret_cast<const char*>(logits->data()), std::streamsize(logits->size() * sizeof(float)));
      begin = end;
    }
  } else {
    put(out, std::int32_t(prompt.size() + std::size_t(decode)));
    put(out, std::int32_t(vocab));
    int token = 0;
    for (int step = 0; step < int(prompt.size()) + decode; ++step) {
      token = step < int(prompt.size()) ? prompt[std::size_t(step)] : argmax((*engine)->logits());
      const int one[1] = {token};
      const std::vector<const float*> media =
          step < int(prompt.size()) ? rows_of(std::size_t(step), std::size_t(step) + 1) : std::vector<const float*>{};
      auto logits = (*engine)->eval(one, media);
      if (!logits) {
        std::fprintf(stderr, "waste-dump-logits: step %d: %s\n", step, logits.error().message.c_str());
        return 1;
      }
      put(out, std::int32_t(token));
      out.write(reinterpret_cast<const char*>(logits->data()), std::streamsize(logits->size() * sizeof(float)));
    }
  }
  if (!out.flush()) {
    std::fprintf(stderr, "waste-dump-logits: write failed: %s\n", out_path.c_str());
    return 1;
  }
  if (!trace_path.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& tok : trace.tokens) {
      nlohmann::json e = {{"token", tok.token}};
      const std::pair<const char*, const std::vector<std::pair<int, std::vector<int>>>*> parts[] = {
          {"experts", &tok.experts}, {"attended", &tok.attended}, {"blocks", &tok.blocks}};
      for (const auto& [name, list] : parts) {
        nlohmann::json m = nlohmann::json::object();
        for (const auto& [layer, ids] : *list) m[std::to_string(layer)] = ids;
        e[name] = std::move(m);
      }
      j.push_back(std::move(e));
    }
    std::ofstream t(trace_path, std::ios::trunc);
    t << j.dump();
    if (!t.flush()) {
      std::fprintf(stderr, "waste-dump-logits: write failed: %s\n", trace_path.c_str());
      return 1;
    }
  }
  return 0;
}
