#include "cli/bench/long_context.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "compute/model/run_state.hpp"

namespace waste::cli::bench {
namespace {

// Rows [from, to) of every MLA layer's latent cache become copies of rows [0, from).
void replicate_latent_rows(model::RunState& state, int from, int to) {
  const std::size_t width = std::size_t(state.latent_width());
  for (int layer = 0; layer < state.n_layers(); ++layer) {
    if (state.is_kda(layer)) continue;
    std::span<float> cache = state.latent_cache(layer);
    if (cache.empty()) continue;  // a layer without attention state (dense-only models)
    for (int t = from; t < to; ++t) {
      std::memcpy(cache.data() + std::size_t(t) * width, cache.data() + std::size_t(t % from) * width,
                  width * sizeof(float));
    }
  }
}

double min_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

}  // namespace

std::vector<int> bench_prompt_ids(int n, int vocab) {
  std::vector<int> ids(static_cast<std::size_t>(n));
  const int span = std::max(vocab - 16, 1);
  for (int i = 0; i < n; ++i) ids[std::size_t(i)] = int((std::uint64_t(i) * 7919u + 13u) % std::uint64_t(span));
  return ids;
}

double PositionResult::best_ms() const { return min_of(ms_per_token); }
double PositionResult::best_mla_ms() const { return min_of(mla_ms_per_token); }

double LongContextReport::rate_ratio() const {
  if (positions.size() < 2 || positions.back().best_ms() <= 0) return 0.0;
  return positions.front().best_ms() / positions.back().best_ms();
}

Result<std::vector<int>> parse_position_list(const std::string& text) {
  std::vector<int> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, comma - begin);
    int value = 0;
    std::size_t used = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value < 2) {
      return make_error(Errc::argument, "--positions: '" + item + "' is not a position of at least 2");
    }
    out.push_back(value);
    begin = comma + 1;
  }
  return out;
}

Result<LongContextReport> run_long_context(Engine& engine, const LongContextArgs& args, bool profiling) {
  const int ctx = engine.run_state().ctx_tokens();
  for (int p : args.positions) {
    if (std::int64_t(p) + args.decode_tokens > ctx) {
      return make_error(Errc::argument, "--positions: decoding " + std::to_string(args.decode_tokens) +
                                            " tokens from position " + std::to_string(p) +
                                            " does not fit a context of " + std::to_string(ctx) + " (--ctx)");
    }
  }
  const int vocab = engine.config().vocab;
  const int max_position = *std::max_element(args.positions.begin(), args.positions.end());
  const std::vector<int> ids = bench_prompt_ids(std::max(max_position, args.prompt_tokens), vocab);

  // Snapshots: the state after P-1 tokens for each position (replicate builds them from one prefill).
  std::vector<model::RunState> snapshots;
  snapshots.reserve(args.positions.size());
  engine.reset();
  if (args.fill == ContextFill::replicate) {
    const int prefix_tokens = std::min(args.prompt_tokens, max_position - 1);
    auto fed = engine.eval(std::span<const int>(ids).first(std::size_t(prefix_tokens)));
    if (!fed) return std::unexpected(fed.error().with_context("prefill of " + std::to_string(prefix_tokens) + " tokens"));
    const model::RunState prefix = engine.run_state();
    for (int p : args.positions) {
      model::RunState s = prefix;
      if (p - 1 < prefix_tokens) {  // shorter than the prompt: feed it for real
        engine.reset();
        auto short_fed = engine.eval(std::span<const int>(ids).first(std::size_t(p - 1)));
        if (!short_fed) return std::unexpected(short_fed.error().with_context("prefill to position " + std::to_string(p)));
        s = engine.run_state();
      } else {
        replicate_latent_rows(s, prefix_tokens, p - 1);
        s.set_position(p - 1);
      }
      snapshots.push_back(std::move(s));
    }
  } else {
    for (int p : args.positions) {
      engine.reset();
      auto fed = engine.eval(std::span<const int>(ids).first(std::size_t(p - 1)));
      if (!fed) return std::unexpected(fed.error().with_context("prefill to position " + std::to_string(p)));
      snapshots.push_back(engine.run_state());
    }
  }

  LongContextReport report;
  report.fill = args.fill;
  report.prompt_tokens = args.prompt_tokens;
  report.decode_tokens = args.decode_tokens;
  for (int p : args.positions) report.positions.push_back({p, {}, {}, {}, true});
  GenerateParams params;
  params.max_tokens = args.decode_tokens;
  params.eos_token = -2;
  for (int round = 0; round < args.rounds; ++round) {
    for (std::size_t i = 0; i < args.positions.size(); ++i) {
      const int p = args.positions[i];
      engine.run_state() = snapshots[i];
      const int last = ids[std::size_t(p - 1)];  // the token at position p - 1
      // Untimed: logits at position p - 1, the prompt's last token (a prompt token, as in a fresh
      // run of these ids: prompt and decode bits differ under the per-token rules).
      auto step = engine.eval(std::span<const int>(&last, 1), {}, FeedKind::prompt);
      if (!step) return std::unexpected(step.error().with_context("position " + std::to_string(p)));
      engine.reset_profile();
      auto result = engine.generate({}, params);
      if (!result) return std::unexpected(result.error().with_context("decode at position " + std::to_string(p)));
      const double n = double(std::max<std::size_t>(result->tokens.size(), 1));
      if (round == 0) {
        report.positions[i].tokens = result->tokens;
      } else if (result->tokens != report.positions[i].tokens) {
        report.positions[i].rounds_agree = false;
      }
      report.positions[i].ms_per_token.push_back(1000.0 * result->generate_seconds / n);
      report.positions[i].mla_ms_per_token.push_back(
          profiling ? 1000.0 * engine.profile()[profile::Stage::attn_mla].seconds / n : 0.0);
    }
  }
  engine.reset();
  return report;
}

nlohmann::json long_context_json(const LongContextReport& r) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : r.positions) {
    list.push_back({{"position", p.position},
                    {"ms_per_token", p.best_ms()},
                    {"tokens_per_second", p.best_ms() > 0 ? 1000.0 / p.best_ms() : 0.0},
                    {"attn_mla_ms_per_token", p.best_mla_ms()},
                    {"rounds_ms_per_token", p.ms_per_token},
                    {"tokens", p.tokens},
                    {"rounds_agree", p.rounds_agree}});
  }
  return {{"fill", r.fill == ContextFill::replicate ? "replicate" : "prefill"},
          {"prompt_tokens", r.prompt_tokens},
          {"decode_tokens", r.decode_tokens},
          {"positions", list},
          {"rate_last_vs_first", r.rate_ratio()}};
}

void print_long_context(const LongContextReport& r) {
  std::printf("decode by context position (%s fill, %d timed tokens per round, best of %zu rounds)\n",
              r.fill == ContextFill::replicate ? "replicate" : "prefill", r.decode_tokens,
              r.positions.empty() ? std::size_t(0) : r.positions.front().ms_per_token.size());
  std::printf("%10s %12s %10s %14s %10s\n", "position", "ms/token", "tok/s", "attn_mla ms", "rate");
  const double first = r.positions.empty() ? 0.0 : r.positions.front().best_ms();
  for (const auto& p : r.positions) {
    std::printf("%10d %12.1f %10.2f %14.2f %9.0f%%\n", p.position, p.best_ms(),
                p.best_ms() > 0 ? 1000.0 / p.best_ms() : 0.0, p.best_mla_ms(),
                p.best_ms() > 0 ? 100.0 * first / p.best_ms() : 0.0);
  }
}

}  // namespace waste::cli::bench
