// waste bench MODEL: a fixed workload (a prompt of P ids, then N greedy decoded tokens) with
// prefill and decode reported separately; one mixed tok/s would hide which one is slow.
// Structured as workload -> report -> printers so further modes (profile, sweep, io-only) can
// add a workload or a printer without touching the others.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"

namespace waste::cli {
namespace {

struct BenchArgs {
  EngineArgs engine;
  int prompt_tokens = 64;
  int decode_tokens = 128;
  bool json = false;
};

struct PhaseReport {
  int tokens = 0;
  double seconds = 0;
  ExpertSourceStats experts;  // this phase's counters only
  [[nodiscard]] double tokens_per_second() const { return seconds > 0 ? tokens / seconds : 0.0; }
};

struct BenchReport {
  PhaseReport prefill;
  PhaseReport decode;
  ModelInfo info;
};

ExpertSourceStats minus(const ExpertSourceStats& a, const ExpertSourceStats& b) {
  ExpertSourceStats d;
  d.hits = a.hits - b.hits;
  d.misses = a.misses - b.misses;
  d.bytes_read = a.bytes_read - b.bytes_read;
  d.prefetch_issued = a.prefetch_issued - b.prefetch_issued;
  d.wait_seconds = a.wait_seconds - b.wait_seconds;
  return d;
}

// The prompt: a fixed spread of ids (no specials near the end of the vocabulary) so every run
// and every machine measures the same tokens.
std::vector<int> bench_prompt(int n, int vocab) {
  std::vector<int> ids(static_cast<std::size_t>(n));
  const int span = std::max(vocab - 16, 1);
  for (int i = 0; i < n; ++i) ids[std::size_t(i)] = int((std::uint64_t(i) * 7919u + 13u) % std::uint64_t(span));
  return ids;
}

Result<BenchReport> run_workload(Engine& engine, int prompt_tokens, int decode_tokens) {
  BenchReport report;
  report.info = engine.info();
  const std::vector<int> prompt = bench_prompt(prompt_tokens, engine.config().vocab);
  engine.reset();

  ExpertSourceStats before = engine.stats();
  auto start = std::chrono::steady_clock::now();
  auto fed = engine.eval(prompt);
  if (!fed) return std::unexpected(fed.error());
  report.prefill.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.prefill.tokens = prompt_tokens;
  report.prefill.experts = minus(engine.stats(), before);

  GenerateParams params;
  params.max_tokens = decode_tokens;
  params.eos_token = -2;  // the workload is fixed: never cut short by eos
  before = engine.stats();
  auto result = engine.generate({}, params);
  if (!result) return std::unexpected(result.error());
  report.decode.seconds = result->generate_seconds;
  report.decode.tokens = int(result->tokens.size());
  report.decode.experts = minus(engine.stats(), before);
  return report;
}

nlohmann::json phase_json(const PhaseReport& p) {
  return {{"tokens", p.tokens},
          {"seconds", p.seconds},
          {"tokens_per_second", p.tokens_per_second()},
          {"experts_hit", p.experts.hits},
          {"experts_missed", p.experts.misses},
          {"bytes_read", p.experts.bytes_read},
          {"io_wait_seconds", p.experts.wait_seconds}};
}

void print_json_report(const BenchReport& r, const EngineArgs& args) {
  print_json({{"model", args.model},
              {"threads", r.info.threads},
              {"kernel_isa", r.info.kernel_isa},
              {"expert_format", r.info.expert_format},
              {"direct_io", r.info.direct_io},
              {"prefill", phase_json(r.prefill)},
              {"decode", phase_json(r.decode)}});
}

void print_table(const BenchReport& r) {
  std::printf("threads %d  kernels %s  experts %s  direct_io %s\n", r.info.threads, r.info.kernel_isa.c_str(),
              r.info.expert_format.c_str(), r.info.direct_io ? "on" : "off");
  std::printf("%-8s %7s %10s %10s %10s %10s %6s %10s\n", "phase", "tokens", "seconds", "tok/s", "hits", "misses",
              "hit%", "GB read");
  for (const auto& [name, p] : {std::pair{"prefill", &r.prefill}, std::pair{"decode", &r.decode}}) {
    const std::uint64_t total = p->experts.hits + p->experts.misses;
    std::printf("%-8s %7d %10.3f %10.2f %10llu %10llu %6.1f %10.4f\n", name, p->tokens, p->seconds,
                p->tokens_per_second(), static_cast<unsigned long long>(p->experts.hits),
                static_cast<unsigned long long>(p->experts.misses),
                total ? 100.0 * double(p->experts.hits) / double(total) : 0.0, double(p->experts.bytes_read) / 1e9);
  }
}

int run_bench(BenchArgs a) {
  if (a.prompt_tokens < 1) return report_error("bench", "--prompt-tokens must be at least 1");
  if (std::int64_t(a.prompt_tokens) + a.decode_tokens >= a.engine.ctx) {
    return report_error("bench", "prompt " + std::to_string(a.prompt_tokens) + " + decode " +
                                     std::to_string(a.decode_tokens) + " tokens do not fit a context of " +
                                     std::to_string(a.engine.ctx) + " (--ctx)");
  }
  auto engine = open_engine(a.engine);
  if (!engine) return report_error("bench", engine.error());
  auto report = run_workload(**engine, a.prompt_tokens, a.decode_tokens);
  if (!report) return report_error("bench", report.error());
  if (a.json) {
    print_json_report(*report, a.engine);
  } else {
    print_table(*report);
  }
  return 0;
}

const CommandRegistration kRegistration{Command{
    "bench", "Measure prefill and decode speed on a fixed workload",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<BenchArgs>();
      add_engine_options(sub, args->engine);
      sub.add_option("--prompt-tokens", args->prompt_tokens, "Prompt length in tokens")->check(CLI::PositiveNumber);
      sub.add_option("-n,--tokens", args->decode_tokens, "Tokens to decode")->check(CLI::NonNegativeNumber);
      sub.add_flag("--json", args->json, "JSON output");
      return [args] { return run_bench(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
