#include "cli/bench/streams.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/bench/long_context.hpp"

namespace waste::cli::bench {
namespace {

int argmax(std::span<const float> logits) {
  return int(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

Result<std::vector<int>> parse_stream_counts(const std::string& text) {
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
    if (item.empty() || used != item.size() || value < 1 || value > 64) {
      return make_error(Errc::argument, "--streams: '" + item + "' is not a stream count from 1 to 64");
    }
    out.push_back(value);
    begin = comma + 1;
  }
  return out;
}

namespace {

// N fresh sequences, each its prompt (untimed, one feed each, as a server admits them), then
// `decode_tokens` lockstep passes of every sequence's greedy token, timed.
Result<StreamsRun> run_level(Engine& engine, const StreamsArgs& args, const std::vector<int>& base, int n) {
  std::vector<std::unique_ptr<EngineSequence>> seqs;
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < n; ++i) {
    auto seq = engine.new_sequence();
    if (!seq) return std::unexpected(seq.error().with_context("--streams " + std::to_string(n)));
    if ((*seq)->ctx_tokens() < args.prompt_tokens + args.decode_tokens) {
      return make_error(Errc::argument, "--streams: prompt " + std::to_string(args.prompt_tokens) + " + decode " +
                                            std::to_string(args.decode_tokens) + " tokens do not fit a context of " +
                                            std::to_string((*seq)->ctx_tokens()) + " (--ctx)");
    }
    seqs.push_back(std::move(*seq));
    std::vector<int> p = base;  // rotated per stream: the same tokens, different routes per position
    std::rotate(p.begin(), p.begin() + (std::size_t(i) * 7u) % p.size(), p.end());
    prompts.push_back(std::move(p));
  }
  for (int i = 0; i < n; ++i) {
    const SequenceFeed feed{seqs[std::size_t(i)].get(), prompts[std::size_t(i)], {}, FeedKind::prompt};
    if (Status fed = engine.feed_batch(std::span<const SequenceFeed>(&feed, 1)); !fed) {
      return std::unexpected(fed.error().with_context("--streams " + std::to_string(n) + ": prompt of stream " +
                                                      std::to_string(i)));
    }
  }
  std::vector<int> next(std::size_t(n), 0);
  std::vector<SequenceFeed> feeds(static_cast<std::size_t>(n));
  StreamsRun run;
  run.tokens.assign(std::size_t(n), {});
  engine.reset_profile();
  const std::uint64_t misses_before = engine.stats().misses;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < args.decode_tokens; ++step) {
    for (int i = 0; i < n; ++i) {
      next[std::size_t(i)] = argmax(seqs[std::size_t(i)]->logits());
      run.tokens[std::size_t(i)].push_back(next[std::size_t(i)]);
      feeds[std::size_t(i)] = SequenceFeed{seqs[std::size_t(i)].get(),
                                           std::span<const int>(&next[std::size_t(i)], 1), {}, FeedKind::decode};
    }
    if (Status fed = engine.feed_batch(feeds); !fed) {
      return std::unexpected(fed.error().with_context("--streams " + std::to_string(n) + ": pass " +
                                                      std::to_string(step)));
    }
  }
  run.streams = n;
  run.passes = args.decode_tokens;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.profile = engine.profile();
  run.expert_misses = engine.stats().misses - misses_before;
  return run;
}

}  // namespace

Result<StreamsReport> run_streams(Engine& engine, const StreamsArgs& args) {
  const std::vector<int> base = bench_prompt_ids(args.prompt_tokens, engine.config().vocab);
  StreamsReport report;
  report.prompt_tokens = args.prompt_tokens;
  if (args.warm && !args.counts.empty()) {
    // Stream i's prompt and tokens do not depend on the count, so the largest count's streams
    // route every expert any level will: no level pays the first reads of the cache.
    auto warm = run_level(engine, args, base, *std::max_element(args.counts.begin(), args.counts.end()));
    if (!warm) return std::unexpected(warm.error().with_context("warm-up"));
  }
  for (int n : args.counts) {
    auto run = run_level(engine, args, base, n);
    if (!run) return std::unexpected(run.error());
    report.runs.push_back(std::move(*run));
  }
  return report;
}

nlohmann::json streams_json(const StreamsReport& r, bool with_profile) {
  nlohmann::json runs = nlohmann::json::array();
  for (const StreamsRun& run : r.runs) {
    nlohmann::json j = {{"streams", run.streams},
                        {"passes", run.passes},
                        {"seconds", run.seconds},
                        {"aggregate_tokens_per_second", run.aggregate_tokens_per_second()},
                        {"ms_per_pass", run.ms_per_pass()},
                        {"expert_misses", run.expert_misses},
                        {"tokens", run.tokens}};
    if (with_profile) j["profile"] = nlohmann::json::parse(profile::profile_to_json(run.profile));
    runs.push_back(std::move(j));
  }
  return {{"prompt_tokens", r.prompt_tokens}, {"streams", std::move(runs)}};
}

void print_streams(const StreamsReport& r, bool with_profile) {
  const double one = r.runs.empty() ? 0.0 : r.runs.front().aggregate_tokens_per_second();
  std::printf("%-8s %7s %10s %12s %10s %12s\n", "streams", "passes", "seconds", "agg tok/s", "ms/pass", "vs first");
  for (const StreamsRun& run : r.runs) {
    std::printf("%-8d %7d %10.3f %12.2f %10.2f %11.2fx\n", run.streams, run.passes, run.seconds,
                run.aggregate_tokens_per_second(), run.ms_per_pass(),
                one > 0 ? run.aggregate_tokens_per_second() / one : 0.0);
  }
  if (!with_profile) return;
  for (const StreamsRun& run : r.runs) {
    std::printf("\n%d streams: profile of %d passes\n%s", run.streams, run.passes,
                profile::format_profile_table(run.profile).c_str());
  }
}

}  // namespace waste::cli::bench
