// waste eval MODEL --file TEXT | --ids-file IDS: perplexity of a text. Every token after the
// first is scored by the log-softmax (in double) of the logits that precede it.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"

namespace waste::cli {
namespace {

struct EvalArgs {
  EngineArgs engine;
  std::string file;
  std::string ids_file;
  bool bos = false;
  bool json = false;
  bool quiet = false;
};

// -log softmax(logits)[target], in double so long texts do not drift.
double token_nll(std::span<const float> logits, int target) {
  double max = logits[0];
  for (const float v : logits) max = std::max(max, double(v));
  double sum = 0;
  for (const float v : logits) sum += std::exp(double(v) - max);
  return -(double(logits[std::size_t(target)]) - max - std::log(sum));
}

int run_eval(EvalArgs a) {
  if (a.file.empty() && a.ids_file.empty()) return report_error("eval", "give --file TEXT or --ids-file IDS");
  std::vector<int> ids;
  if (!a.ids_file.empty()) {
    auto text = read_text(a.ids_file);
    if (!text) return report_error("eval", text.error());
    auto parsed = parse_ids(*text);
    if (!parsed) return report_error("eval", parsed.error().with_context(a.ids_file));
    ids = std::move(*parsed);
  } else {
    auto tokenizer = load_tokenizer(a.engine.model);
    if (!tokenizer) return report_error("eval", tokenizer.error());
    auto text = read_text(a.file);
    if (!text) return report_error("eval", text.error());
    if (a.bos) ids.push_back(tokenizer->bos());
    tokenizer->encode(*text, ids);
  }
  if (ids.size() < 2) return report_error("eval", "need at least 2 tokens to score, got " + std::to_string(ids.size()));
  if (ids.size() > std::size_t(a.engine.ctx)) {
    std::fprintf(stderr, "waste eval: scoring the first %d of %zu tokens (--ctx)\n", a.engine.ctx, ids.size());
    ids.resize(std::size_t(a.engine.ctx));
  }
  auto opened = open_engine(a.engine);
  if (!opened) return report_error("eval", opened.error());
  Engine& engine = **opened;

  double nll_sum = 0;
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
    auto logits = engine.eval(std::span<const int>(&ids[i], 1));
    if (!logits) return report_error("eval", logits.error());
    nll_sum += token_nll(*logits, ids[i + 1]);
  }
  const std::size_t scored = ids.size() - 1;
  const double mean = nll_sum / double(scored);
  const double ppl = std::exp(mean);
  if (a.json) {
    nlohmann::json doc{{"tokens", ids.size()}, {"scored", scored}, {"mean_nll", mean}, {"perplexity", ppl}};
    doc["experts"] = {{"hits", engine.stats().hits}, {"misses", engine.stats().misses},
                      {"bytes_read", engine.stats().bytes_read}};
    print_json(doc);
  } else {
    std::printf("tokens %zu\nscored %zu\nmean_nll %.6f\nperplexity %.6f\n", ids.size(), scored, mean, ppl);
  }
  return 0;
}

const CommandRegistration kRegistration{Command{
    "eval", "Perplexity of a text (or token ids) under the model",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<EvalArgs>();
      add_engine_options(sub, args->engine);
      auto* file = sub.add_option("--file", args->file, "Text file to score ('-' = stdin)");
      auto* ids = sub.add_option("--ids-file", args->ids_file, "File of token ids to score");
      file->excludes(ids);
      sub.add_flag("--bos", args->bos, "Prepend the tokenizer's BOS to the text");
      sub.add_flag("--json", args->json, "JSON output");
      sub.add_flag("-q,--quiet", args->quiet, "No progress output");
      return [args] { return run_eval(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
