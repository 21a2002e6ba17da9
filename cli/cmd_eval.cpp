// waste eval MODEL "prompt": the next-token distribution after a prompt -- the --top N most
// likely tokens with their logits and probabilities (softmax over the whole vocabulary, in
// double), one line each or --json.
// waste eval MODEL --file TEXT | --ids-file IDS: perplexity of a text. Every token after the
// first is scored by the log-softmax (in double) of the logits that precede it.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "compute/sampling/token_nll.hpp"

namespace waste::cli {
namespace {

struct EvalArgs {
  EngineArgs engine;
  std::string prompt;  // next-token mode
  int top = 10;        // next-token mode: tokens listed
  std::string file;
  std::string ids_file;
  bool bos = false;
  bool json = false;
  bool quiet = false;
};

// One line per token: id, logit, probability, the token's text as a JSON string (so a space
// or a newline piece is visible).
struct NextToken {
  int id = 0;
  float logit = 0;
  double prob = 0;
};

// The `top` highest logits, ties by the lower id; probabilities from a softmax over all of them.
std::vector<NextToken> top_tokens(std::span<const float> logits, int top) {
  double max = logits[0];
  for (const float v : logits) max = std::max(max, double(v));
  double sum = 0;
  for (const float v : logits) sum += std::exp(double(v) - max);
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto n = std::min<std::size_t>(std::size_t(top), order.size());
  std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(n), order.end(), [&](int x, int y) {
    return logits[std::size_t(x)] != logits[std::size_t(y)] ? logits[std::size_t(x)] > logits[std::size_t(y)] : x < y;
  });
  std::vector<NextToken> out;
  for (std::size_t i = 0; i < n; ++i) {
    const float logit = logits[std::size_t(order[i])];
    out.push_back({order[i], logit, std::exp(double(logit) - max) / sum});
  }
  return out;
}

std::string json_string(const std::string& bytes) {
  return nlohmann::json(bytes).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int run_next_token(const EvalArgs& a) {
  auto container = read_container(a.engine.model);  // read once: the tokenizer and the engine share it
  if (!container) return report_error("eval", container.error());
  auto tokenizer = load_tokenizer(**container);
  if (!tokenizer) return report_error("eval", tokenizer.error());
  std::vector<int> ids;
  if (a.bos) ids.push_back(tokenizer->bos());
  tokenizer->encode(a.prompt, ids);
  if (ids.empty()) return report_error("eval", "the prompt has no tokens");
  if (ids.size() > std::size_t(a.engine.ctx)) {
    return report_error("eval", "the prompt is " + std::to_string(ids.size()) + " tokens, more than --ctx " +
                                    std::to_string(a.engine.ctx));
  }
  auto opened = open_engine(a.engine, *container);
  if (!opened) return report_error("eval", opened.error());
  auto logits = (*opened)->eval(ids);
  if (!logits) return report_error("eval", logits.error());
  const std::vector<NextToken> top = top_tokens(*logits, a.top);
  if (a.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& t : top) {
      list.push_back({{"id", t.id}, {"logit", t.logit}, {"prob", t.prob}, {"piece", tokenizer->decode_token(t.id)}});
    }
    print_json({{"prompt_tokens", ids.size()}, {"vocab", logits->size()}, {"top", list}});
    return 0;
  }
  for (const auto& t : top) {
    std::printf("%6d  %9.4f  %8.6f  %s\n", t.id, double(t.logit), t.prob, json_string(tokenizer->decode_token(t.id)).c_str());
  }
  std::fflush(stdout);
  return 0;
}

int run_eval(EvalArgs a) {
  if (!a.prompt.empty()) {
    if (!a.file.empty() || !a.ids_file.empty()) {
      return report_error("eval", "give a prompt (next-token distribution) or --file/--ids-file (perplexity), not both");
    }
    return run_next_token(a);
  }
  if (a.file.empty() && a.ids_file.empty()) {
    return report_error("eval", "give a prompt, --file TEXT or --ids-file IDS");
  }
  std::vector<int> ids;
  std::shared_ptr<const ContainerInfo> container;  // read here when the tokenizer needs it, else by the open
  if (!a.ids_file.empty()) {
    auto text = read_text(a.ids_file);
    if (!text) return report_error("eval", text.error());
    auto parsed = parse_ids(*text);
    if (!parsed) return report_error("eval", parsed.error().with_context(a.ids_file));
    ids = std::move(*parsed);
  } else {
    auto read = read_container(a.engine.model);
    if (!read) return report_error("eval", read.error());
    container = std::move(*read);
    auto tokenizer = load_tokenizer(*container);
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
  auto opened = open_engine(a.engine, std::move(container));
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
    "eval", "Next-token distribution after a prompt, or the perplexity of a text (--file, --ids-file)",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<EvalArgs>();
      add_engine_options(sub, args->engine);
      sub.add_option("prompt", args->prompt, "Prompt text: list the most likely next tokens")
          ->type_name("TEXT")
          ->default_str("none");
      sub.add_option("--top", args->top, "Next tokens listed (at most the vocabulary)")
          ->type_name("N")
          ->check(int_range("--top", 1, kIntMax));
      auto* file = sub.add_option("--file", args->file, "Text file to score ('-' = stdin)")
                       ->type_name("FILE")
                       ->default_str("none");
      auto* ids = sub.add_option("--ids-file", args->ids_file, "File of token ids to score")
                      ->type_name("FILE")
                      ->default_str("none");
      file->excludes(ids);
      sub.add_flag("--bos", args->bos, "Prepend the tokenizer's BOS to the text or prompt");
      sub.add_flag("--json", args->json, "JSON output");
      sub.add_flag("-q,--quiet", args->quiet, "No progress output");
      return [args] { return run_eval(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
