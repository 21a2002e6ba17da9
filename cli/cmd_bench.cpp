// waste bench MODEL: a fixed workload (a prompt of P ids, then N greedy decoded tokens) with
// prefill and decode reported separately; one mixed tok/s would hide which one is slow.
// Structured as workload -> report -> printers so further modes (profile, sweep, io-only) can
// add a workload or a printer without touching the others.
//
// Modes (cli/bench/*): --profile (stage table of each phase), --compute-only (every expert
// resident), --record-trace / --io-only --trace (expert I/O alone through waste-ioserver),
// --clients N (N processes on one daemon), --sweep BUDGETS (table + PNG per budget),
// --policy-sim TRACE (the daemon's cache policies on a routing trace, no model, no disk),
// --reader-sweep (the daemon's readers against fio's random-read ceiling on the container).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cli/bench/bench_engine.hpp"
#include "cli/bench/child_process.hpp"
#include "cli/bench/engram_report.hpp"
#include "cli/bench/bench_daemon.hpp"
#include "cli/bench/floor.hpp"
#include "cli/bench/io_replay.hpp"
#include "cli/bench/long_context.hpp"
#include "cli/bench/multi_client.hpp"
#include "cli/bench/policy_sim.hpp"
#include "cli/bench/reader_sweep.hpp"
#include "cli/bench/streams.hpp"
#include "cli/bench/sweep.hpp"
#include "cli/bench/trace.hpp"
#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "shared/memory/client_sizing.hpp"
#include "cli/option_checks.hpp"
#include "compute/forward/expert_batch.hpp"
#include "compute/forward/int8_mode.hpp"
#include "compute/forward/head_mode.hpp"
#include "compute/forward/lut_mode.hpp"
#include "compute/engram/engram_read_meter.hpp"
#include "compute/io/daemon_attach.hpp"
#include "shared/container/container.hpp"
#include "shared/memory/budget.hpp"

namespace waste::cli {
namespace {

struct BenchArgs {
  EngineArgs engine;
  int prompt_tokens = 64;
  int decode_tokens = 128;
  bool json = false;
  int lookahead = -1;              // -1 automatic
  bool profile = false;
  bool compute_only = false;
  bool floor = false;              // --floor: the compute floor measured beside the step
  bool embedding_on_disk = false;  // --embedding-on-disk: one embed_tokens row read per token (A/B)
  std::string record_trace;        // write the run's expert trace here
  bool io_only = false;
  std::string trace;               // --io-only input
  int passes = 2;                  // --io-only: replays of the trace (the first warms the arena)
  int clients = 0;                 // > 0: multi-process run on one daemon
  std::string sweep;               // budgets
  std::string sweep_md, sweep_png; // --sweep outputs
  bool drop_caches = false;
  int prefill_chunk = 64;
  std::string prefill_matmul;      // --prefill-matmul: WASTE_PREFILL_MATMUL's values, for A/B (empty: as set)
  std::string prefill_int8;        // --prefill-int8: WASTE_PREFILL_INT8's values, for A/B (empty: as set)
  std::string decode_int8;         // --decode-int8: WASTE_DECODE_INT8's values (empty: as set)
  std::string lut;                 // --lut: WASTE_LUT's values, for A/B (empty: as set)
  std::string decode_head;         // --decode-head: WASTE_DECODE_HEAD's values (empty: as set)
  std::string policy_sim;          // routing trace (JSON lines)
  std::string capacity;            // --policy-sim capacities
  int sim_lookahead = 0;           // --policy-sim: hinted next-layer experts per layer
  int sim_clients = 1;             // --policy-sim: interleaved clients sharing the cache
  int sim_wrong = 0;               // of which not used by the next layer
  std::string positions;           // --positions: decode speed at these context positions
  std::string context_fill = "replicate";
  std::string streams;             // --streams: decode of N sequences in lockstep (feed_batch), per count
  std::string daemon_policy;       // --io-only: the daemon's --policy (empty = its default)
  bool reader_sweep = false;
  std::string depths = "1,2,4,8,16";  // --reader-sweep queue depths
  std::string run_bytes = "1G";    // --reader-sweep: bytes per (reader, depth) run
  bool no_fio = false;
  int rounds = 0;                  // --positions (default 3) / --reader-sweep (default 1) rounds
  std::string engram_readahead;    // --engram-readahead on|off (empty: the engine decides, on)
  std::optional<bool> engram_readahead_on;  // run_bench's parse of it (nullopt: not given)
};

struct PhaseReport {
  int tokens = 0;
  double seconds = 0;
  ExpertSourceStats experts;  // this phase's counters only
  EngineProfile profile;      // this phase's stage timings (zero unless --profile)
  engram::EngramRowStats engram;  // this phase's Engram row counters (models with Engram layers)
  [[nodiscard]] double tokens_per_second() const { return seconds > 0 ? tokens / seconds : 0.0; }
};

struct BenchReport {
  PhaseReport prefill;
  PhaseReport decode;
  ModelInfo info;
  bool engram = false;        // the model reads Engram rows (engram_* below apply)
  std::string engram_origin;  // Engine::engram_origin()
  bool engram_readahead = false;
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

Result<BenchReport> run_workload(Engine& engine, int prompt_tokens, int decode_tokens) {
  BenchReport report;
  report.info = engine.info();
  const std::vector<int> prompt = bench::bench_prompt_ids(prompt_tokens, engine.config().vocab);
  engine.reset();

  engine.reset_profile();
  const auto engram_now = [&engine] { return engine.engram_stats().value_or(engram::EngramRowStats{}); };
  report.engram = engine.engram_stats().has_value();
  report.engram_origin = engine.engram_origin();
  report.engram_readahead = engine.engram_readahead();
  ExpertSourceStats before = engine.stats();
  engram::EngramRowStats engram_before = engram_now();
  auto start = std::chrono::steady_clock::now();
  auto fed = engine.eval(prompt);
  if (!fed) return std::unexpected(fed.error().with_context("prefill"));
  report.prefill.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.prefill.tokens = prompt_tokens;
  report.prefill.experts = minus(engine.stats(), before);
  report.prefill.profile = engine.profile();
  report.prefill.engram = bench::engram_delta(engram_now(), engram_before);
  engine.reset_profile();

  GenerateParams params;
  params.max_tokens = decode_tokens;
  params.eos_token = -2;  // the workload is fixed: never cut short by eos
  before = engine.stats();
  engram_before = engram_now();
  auto result = engine.generate({}, params);
  if (!result) return std::unexpected(result.error().with_context("decode"));
  report.decode.seconds = result->generate_seconds;
  report.decode.tokens = int(result->tokens.size());
  report.decode.experts = minus(engine.stats(), before);
  report.decode.profile = engine.profile();
  report.decode.engram = bench::engram_delta(engram_now(), engram_before);
  return report;
}

nlohmann::json phase_json(const PhaseReport& p, bool with_profile) {
  nlohmann::json j = {{"tokens", p.tokens},
          {"seconds", p.seconds},
          {"tokens_per_second", p.tokens_per_second()},
          {"experts_hit", p.experts.hits},
          {"experts_missed", p.experts.misses},
          {"bytes_read", p.experts.bytes_read},
          {"io_wait_seconds", p.experts.wait_seconds},
          {"prefetch_issued", p.experts.prefetch_issued}};
  if (with_profile) j["profile"] = nlohmann::json::parse(profile::profile_to_json(p.profile));
  return j;
}

struct RunContext {
  std::uint64_t budget_bytes = 0;
  std::uint64_t cache_records = 0;
  bool daemon = false;
  bool compute_only = false;
  bool profile = false;
  bench::ProcessMemory memory;  // this process just before the engine closed
};

void print_json_report(const BenchReport& r, const EngineArgs& args, const RunContext& ctx, nlohmann::json floor) {
  nlohmann::json j = {{"model", args.model},
              {"threads", r.info.threads},
              {"kernel_isa", r.info.kernel_isa},
              {"lut", forward::lut_mode_report()},
              {"prefill_int8", forward::int8_prefill_enabled()},
              {"decode_int8", forward::int8_decode_enabled()},
              {"decode_head", forward::head_mode_report()},
              {"expert_format", r.info.expert_format},
              {"direct_io", r.info.direct_io},
              {"budget_bytes", ctx.budget_bytes},
              {"cache_records", ctx.cache_records},
              {"daemon", ctx.daemon},
              {"compute_only", ctx.compute_only},
              {"lookahead", r.info.lookahead},
              {"prefill_chunk", r.info.prefill_chunk},
              {"embedding_resident_bytes", r.info.embedding_resident_bytes},
              {"memory",
               {{"rss_bytes", ctx.memory.rss_bytes},
                {"pss_bytes", ctx.memory.pss_bytes},
                {"shared_bytes", ctx.memory.shared_bytes}}},
              {"prefill", phase_json(r.prefill, ctx.profile)},
              {"decode", phase_json(r.decode, ctx.profile)}};
  if (r.engram) {
    j["engram_origin"] = r.engram_origin;
    j["engram_readahead"] = r.engram_readahead;
    j["prefill"]["engram"] = bench::engram_phase_json({r.prefill.tokens, r.prefill.engram});
    j["decode"]["engram"] = bench::engram_phase_json({r.decode.tokens, r.decode.engram});
  }
  if (!floor.is_null()) j["floor"] = std::move(floor);
  print_json(j);
}

void print_table(const BenchReport& r) {
  std::printf("threads %d  kernels %s  lut %s  experts %s  direct_io %s  embedding %s  prompt int8 %s  decode int8 %s"
              "  decode head %s\n",
              r.info.threads, r.info.kernel_isa.c_str(), forward::lut_mode_report().c_str(),
              r.info.expert_format.c_str(), r.info.direct_io ? "on" : "off",
              r.info.embedding_resident_bytes > 0 ? "resident" : "on disk",
              forward::int8_prefill_enabled() ? "on" : "off", forward::int8_decode_enabled() ? "on" : "off",
              forward::head_mode_report().c_str());
  std::printf("%-8s %7s %10s %10s %10s %10s %6s %10s\n", "phase", "tokens", "seconds", "tok/s", "hits", "misses",
              "hit%", "GB read");
  for (const auto& [name, p] : {std::pair{"prefill", &r.prefill}, std::pair{"decode", &r.decode}}) {
    const std::uint64_t total = p->experts.hits + p->experts.misses;
    std::printf("%-8s %7d %10.3f %10.2f %10llu %10llu %6.1f %10.4f\n", name, p->tokens, p->seconds,
                p->tokens_per_second(), static_cast<unsigned long long>(p->experts.hits),
                static_cast<unsigned long long>(p->experts.misses),
                total ? 100.0 * double(p->experts.hits) / double(total) : 0.0, double(p->experts.bytes_read) / 1e9);
  }
  if (!r.engram) return;  // containers without Engram tables: nothing more
  for (const auto& [name, p] : {std::pair{"prefill", &r.prefill}, std::pair{"decode", &r.decode}}) {
    std::printf("%s\n", bench::engram_phase_line(name, {p->tokens, p->engram}).c_str());
  }
  std::printf("engram  read-ahead %s  %s\n", r.engram_readahead ? "on" : "off", r.engram_origin.c_str());
}

void print_profiles(const BenchReport& r) {
  for (const auto& [name, p] : {std::pair{"prefill", &r.prefill}, std::pair{"decode", &r.decode}}) {
    std::printf("\n%s profile (%d tokens)\n%s", name, p->tokens, profile::format_profile_table(p->profile).c_str());
  }
}

// The workload options a child bench process (--sweep, --clients) repeats.
std::vector<std::string> child_workload_args(const BenchArgs& a) {
  std::vector<std::string> args{"--prompt-tokens", std::to_string(a.prompt_tokens), "-n",
                                std::to_string(a.decode_tokens), "--threads", std::to_string(a.engine.threads),
                                "--ctx", std::to_string(a.engine.ctx), "--lookahead", std::to_string(a.lookahead),
                                "--prefill-chunk", std::to_string(a.prefill_chunk)};
  if (a.engine.no_direct_io) args.push_back("--no-direct-io");
  if (a.engine.verify) args.push_back("--verify");
  if (!a.prefill_matmul.empty()) {
    args.push_back("--prefill-matmul");
    args.push_back(a.prefill_matmul);
  }
  if (!a.decode_int8.empty()) {
    args.push_back("--decode-int8");
    args.push_back(a.decode_int8);
  }
  if (!a.prefill_int8.empty()) {
    args.push_back("--prefill-int8");
    args.push_back(a.prefill_int8);
  }
  if (!a.lut.empty()) {
    args.push_back("--lut");
    args.push_back(a.lut);
  }
  if (!a.decode_head.empty()) {
    args.push_back("--decode-head");
    args.push_back(a.decode_head);
  }
  if (a.profile) args.push_back("--profile");
  if (!a.engram_readahead.empty()) {
    args.push_back("--engram-readahead");
    args.push_back(a.engram_readahead);
  }
  return args;
}

int run_sweep_mode(const BenchArgs& a) {
  auto budgets = bench::parse_budget_list(a.sweep);
  if (!budgets) return report_error("bench", budgets.error());
  bench::SweepArgs s{a.engine.model, *budgets, child_workload_args(a), a.drop_caches};
  auto points = bench::run_sweep(s);
  if (!points) return report_error("bench", points.error());
  const std::string md = bench::sweep_markdown(*points);
  if (!a.sweep_md.empty()) {
    std::ofstream out(a.sweep_md, std::ios::trunc);
    out << md;
    if (!out) return report_error("bench", a.sweep_md + ": cannot write");
  }
  if (!a.sweep_png.empty()) {
    const std::string title = "decode tok/s and hit rate vs budget (" +
                              std::filesystem::path(a.engine.model).filename().string() + ", " +
                              std::to_string(a.prompt_tokens) + "+" + std::to_string(a.decode_tokens) + " tokens)";
    if (auto plotted = bench::plot_sweep(*points, a.sweep_png, title); !plotted) {
      return report_error("bench", plotted.error());
    }
  }
  if (a.json) {
    print_json({{"model", a.engine.model}, {"sweep", bench::sweep_json(*points)}});
  } else {
    std::fputs(md.c_str(), stdout);
  }
  return 0;
}

int run_clients_mode(const BenchArgs& a) {
  bench::MultiClientArgs m{a.engine.model, a.engine.budget, a.clients, child_workload_args(a)};
  auto report = bench::run_multi_client(m);
  if (!report) return report_error("bench", report.error());
  if (a.json) {
    print_json(bench::multi_client_json(*report));
  } else {
    bench::print_multi_client(*report);
  }
  return 0;
}

int run_io_only_mode(const BenchArgs& a) {
  if (a.trace.empty()) return report_error("bench", "--io-only needs --trace FILE (write one with --record-trace)");
  auto text = read_text(a.trace);
  if (!text) return report_error("bench", text.error());
  auto info = ContainerInfo::open(a.engine.model);
  if (!info) return report_error("bench", info.error());
  // Either format: the expert trace --record-trace writes, or a routing trace (JSON lines).
  const bool routing = bench::is_routing_trace(*text);
  Result<std::vector<bench::TraceEvent>> trace = std::vector<bench::TraceEvent>{};
  if (routing) {
    auto parsed = parse_routing_trace(*text);
    if (!parsed) return report_error("bench", parsed.error().with_context(a.trace));
    trace = bench::routing_trace_events(*parsed, info->manifest);
  } else {
    trace = bench::parse_trace(*text);
  }
  if (!trace) return report_error("bench", trace.error().with_context(a.trace));
  std::vector<std::string> daemon_args;
  if (!a.daemon_policy.empty()) daemon_args = {"--policy", a.daemon_policy};
  auto daemon = bench::BenchDaemon::start(a.engine.model, a.engine.budget, 1, daemon_args);
  if (!daemon) return report_error("bench", daemon.error());
  std::vector<bench::ReplayPass> passes;
  {
    std::error_code ec;  // the source reads through the connection: it goes first
    auto connection = connect_or_spawn(std::filesystem::absolute(a.engine.model, ec), ConnectOptions{});
    if (!connection) return report_error("bench", connection.error());
    auto source = open_daemon_source(connection->lease(), info->geometry);
    if (!source) return report_error("bench", source.error());
    auto replayed = bench::replay_trace(**source, *trace, info->geometry.record_bytes, a.passes);
    if (!replayed) return report_error("bench", replayed.error());
    passes = std::move(*replayed);
  }
  if (auto stopped = daemon->stop(); !stopped) return report_error("bench", stopped.error());
  if (a.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& p : passes) list.push_back(bench::replay_json(p));
    print_json({{"model", a.engine.model},
                {"trace", a.trace},
                {"trace_format", routing ? "routing" : "expert"},
                {"policy", a.daemon_policy.empty() ? "default" : a.daemon_policy},
                {"record_bytes", info->geometry.record_bytes},
                {"arena_slots", daemon->arena_slots()},
                {"budget_bytes", daemon->budget_bytes()},
                {"passes", list}});
  } else {
    std::printf("io-only replay of %s (%s trace) through waste-ioserver (budget %.2f GB, %llu arena slots, policy %s)\n",
                a.trace.c_str(), routing ? "routing" : "expert", double(daemon->budget_bytes()) / 1e9,
                static_cast<unsigned long long>(daemon->arena_slots()),
                a.daemon_policy.empty() ? "default" : a.daemon_policy.c_str());
    bench::print_replay_table(passes);
  }
  return 0;
}

int run_policy_sim_mode(const BenchArgs& a) {
  auto text = read_text(a.policy_sim);
  if (!text) return report_error("bench", text.error());
  auto trace = parse_routing_trace(*text);
  if (!trace) return report_error("bench", trace.error().with_context(a.policy_sim));
  bench::PolicySimArgs s;
  if (a.capacity.empty()) {
    s.capacities = bench::default_capacities();
  } else {
    auto list = bench::parse_capacity_list(a.capacity);
    if (!list) return report_error("bench", list.error());
    s.capacities = std::move(*list);
  }
  if (a.sim_wrong > a.sim_lookahead) {
    return report_error("bench", "--sim-wrong " + std::to_string(a.sim_wrong) + " exceeds --sim-lookahead " +
                                     std::to_string(a.sim_lookahead));
  }
  s.clients = a.sim_clients;
  s.hints.lookahead = a.sim_lookahead;
  s.hints.wrong = a.sim_wrong;
  auto report = bench::run_policy_sim(*trace, s);
  if (!report) return report_error("bench", report.error().with_context(a.policy_sim));
  if (a.json) {
    print_json(*report);
  } else {
    std::fputs(bench::policy_sim_table(*report).c_str(), stdout);
  }
  return 0;
}

int run_positions_mode(BenchArgs a) {
  auto positions = bench::parse_position_list(a.positions);
  if (!positions) return report_error("bench", positions.error());
  if (a.floor) return report_error("bench", "--floor and --positions are separate runs");
  bench::LongContextArgs l{*positions, a.prompt_tokens, a.decode_tokens, a.rounds > 0 ? a.rounds : 3,
                           a.context_fill == "prefill" ? bench::ContextFill::prefill : bench::ContextFill::replicate};
  if (l.decode_tokens < 1) return report_error("bench", "--positions needs decoded tokens (-n at least 1)");
  bench::BenchEngineArgs e{a.engine, a.lookahead, /*profile=*/true, a.compute_only, false, a.prefill_chunk, false,
                           a.engram_readahead_on};
  auto engine = bench::open_bench_engine(e);
  if (!engine) return report_error("bench", engine.error().with_context("open"));
  auto report = bench::run_long_context(*engine->open, l, /*profiling=*/true);
  const ModelInfo info = engine->open->info();
  engine->open.engine.reset();  // the engine, then its daemon connection
  if (!report) return report_error("bench", report.error());
  if (a.json) {
    nlohmann::json j = bench::long_context_json(*report);
    j["model"] = a.engine.model;
    j["threads"] = info.threads;
    j["kernel_isa"] = info.kernel_isa;
    j["lut"] = forward::lut_mode_report();
    j["compute_only"] = a.compute_only;
    print_json(j);
  } else {
    std::printf("threads %d  kernels %s  lut %s  %s\n", info.threads, info.kernel_isa.c_str(),
                forward::lut_mode_report().c_str(), a.compute_only ? "compute-only" : "experts through the cache");
    bench::print_long_context(*report);
  }
  return 0;
}

int run_streams_mode(const BenchArgs& a) {
  auto counts = bench::parse_stream_counts(a.streams);
  if (!counts) return report_error("bench", counts.error());
  if (a.floor) return report_error("bench", "--floor and --streams are separate runs");
  if (a.decode_tokens < 1) return report_error("bench", "--streams needs decode passes (-n at least 1)");
  bench::BenchEngineArgs e{a.engine, a.lookahead, a.profile, a.compute_only, false, a.prefill_chunk, false,
                           a.engram_readahead_on};
  auto engine = bench::open_bench_engine(e);
  if (!engine) return report_error("bench", engine.error().with_context("open"));
  auto report = bench::run_streams(*engine->open, bench::StreamsArgs{*counts, a.prompt_tokens, a.decode_tokens});
  const ModelInfo info = engine->open->info();
  engine->open.engine.reset();  // the engine, then its daemon connection
  if (!report) return report_error("bench", report.error());
  if (a.json) {
    nlohmann::json j = bench::streams_json(*report, a.profile);
    j["model"] = a.engine.model;
    j["threads"] = info.threads;
    j["kernel_isa"] = info.kernel_isa;
    j["compute_only"] = a.compute_only;
    print_json(j);
  } else {
    std::printf("threads %d  kernels %s  %s  prompt %d tokens per stream\n", info.threads, info.kernel_isa.c_str(),
                a.compute_only ? "compute-only" : "experts through the cache", a.prompt_tokens);
    bench::print_streams(*report, a.profile);
  }
  return 0;
}

int run_reader_sweep_mode(const BenchArgs& a) {
  auto depths = bench::parse_depth_list(a.depths);
  if (!depths) return report_error("bench", depths.error());
  auto bytes = parse_bytes(a.run_bytes);
  if (!bytes || *bytes == 0) return report_error("bench", "--run-bytes: '" + a.run_bytes + "' is not a byte size (e.g. 1G)");
  bench::ReaderSweepArgs s;
  s.container = a.engine.model;
  s.depths = std::move(*depths);
  s.bytes_per_run = *bytes;
  s.fio = !a.no_fio;
  s.repeat = a.rounds > 0 ? a.rounds : 1;
  auto report = bench::run_reader_sweep(s);
  if (!report) return report_error("bench", report.error());
  if (a.json) {
    print_json(bench::reader_sweep_json(*report));
  } else {
    bench::print_reader_sweep(*report);
  }
  return 0;
}

int run_bench(BenchArgs a) {
  if (!a.engram_readahead.empty()) {  // not given: the engine decides ($WASTE_ENGRAM_READAHEAD, else on)
    auto on = engram::parse_engram_readahead(a.engram_readahead, "--engram-readahead");
    if (!on) return report_error("bench", on.error());
    a.engram_readahead_on = *on;
  }
  if (!a.prefill_matmul.empty()) {
    auto rule = forward::expert_batch::parse_min_tokens(a.prefill_matmul, "--prefill-matmul");
    if (!rule) return report_error("bench", rule.error());
    forward::expert_batch::set_min_tokens(*rule);
  }
  if (!a.prefill_int8.empty()) {
    auto on = forward::parse_int8_prefill(a.prefill_int8, "--prefill-int8");
    if (!on) return report_error("bench", on.error());
    forward::set_int8_prefill(*on);
  }
  if (!a.decode_int8.empty()) {
    auto on = forward::parse_int8_prefill(a.decode_int8, "--decode-int8");
    if (!on) return report_error("bench", on.error());
    forward::set_int8_decode(*on);
  }
  if (!a.lut.empty()) {
    auto mode = forward::parse_lut_mode(a.lut, "--lut");
    if (!mode) return report_error("bench", mode.error());
    forward::set_lut_mode(*mode, "--lut");
  }
  if (!a.decode_head.empty()) {
    auto mode = forward::parse_head_mode(a.decode_head, "--decode-head");
    if (!mode) return report_error("bench", mode.error());
    forward::set_head_mode(*mode, "--decode-head");
  }
  if (!a.policy_sim.empty()) return run_policy_sim_mode(a);
  if (a.engine.model.empty()) return report_error("bench", "a MODEL is required (except with --policy-sim)");
  if (a.reader_sweep) return run_reader_sweep_mode(a);
  if (!a.sweep.empty()) return run_sweep_mode(a);
  if (a.clients > 0) return run_clients_mode(a);
  if (a.io_only) return run_io_only_mode(a);
  if (a.prompt_tokens < 1) return report_error("bench", "--prompt-tokens must be at least 1");
  if (std::int64_t(a.prompt_tokens) + a.decode_tokens >= a.engine.ctx) {
    return report_error("bench", "prompt " + std::to_string(a.prompt_tokens) + " + decode " +
                                     std::to_string(a.decode_tokens) + " tokens do not fit a context of " +
                                     std::to_string(a.engine.ctx) + " (--ctx)");
  }
  if (!a.positions.empty()) return run_positions_mode(a);
  if (!a.streams.empty()) return run_streams_mode(a);
  if (a.floor && !a.compute_only) {
    return report_error("bench", "--floor compares the compute floor with a compute-only step: add --compute-only");
  }
  if (a.floor && a.decode_tokens < 1) return report_error("bench", "--floor needs decoded tokens (-n at least 1)");
  if (a.floor) a.profile = true;  // the per-stage comparison needs the decode profile
  bench::BenchEngineArgs e{a.engine, a.lookahead, a.profile, a.compute_only, !a.record_trace.empty(),
                           a.prefill_chunk, a.embedding_on_disk, a.engram_readahead_on};
  auto engine = bench::open_bench_engine(e);
  if (!engine) return report_error("bench", engine.error().with_context("open"));
  auto report = run_workload(*engine->open, a.prompt_tokens, a.decode_tokens);
  if (!report) return report_error("bench", report.error());
  if (engine->trace) {
    std::ofstream out(a.record_trace, std::ios::trunc);
    out << bench::format_trace(*engine->trace);
    if (!out) return report_error("bench", a.record_trace + ": cannot write the trace");
  }
  const RunContext ctx{engine->open.budget_bytes, engine->open.arena_slots, engine->open.via_daemon, a.compute_only, a.profile,
                       bench::read_process_memory(::getpid()).value_or(bench::ProcessMemory{})};
  std::optional<bench::FloorReport> floor;
  if (a.floor) {  // after the workload, so the micro-benchmarks do not disturb it
    const ContainerInfo* info = &engine->open->container();  // the description the open read
    const ModelConfig& config = engine->open->config();
    auto rates = bench::measure_floor_rates(*info, config, report->info.threads);
    if (!rates) return report_error("bench", rates.error());
    floor = bench::floor_report(*info, config, *rates, report->decode.profile, report->decode.tokens,
                                report->decode.seconds, a.prompt_tokens);
  }
  engine->open.engine.reset();  // the engine, then its daemon connection (stops a private daemon)
  if (a.json) {
    print_json_report(*report, a.engine, ctx, floor ? bench::floor_json(*floor) : nlohmann::json());
  } else {
    print_table(*report);
    if (a.profile) print_profiles(*report);
    if (floor) bench::print_floor(*floor);
  }
  return 0;
}

const CommandRegistration kRegistration{Command{
    "bench", "Measure prefill and decode speed on a fixed workload",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<BenchArgs>();
      add_engine_options(sub, args->engine);
      // --policy-sim needs no MODEL; run_bench checks every other mode has one.
      sub.get_option("model")->required(false)->default_str("none")->description("Container directory (NAME.waste); not with --policy-sim");
      sub.add_option("--prompt-tokens", args->prompt_tokens, "Prompt length in tokens")
          ->type_name("TOKENS")
          ->check(int_range("--prompt-tokens", 1, kMaxCtxTokens));
      sub.add_option("-n,--tokens", args->decode_tokens, "Tokens to decode")
          ->type_name("TOKENS")
          ->check(int_range("-n", 0, kMaxCtxTokens));
      sub.add_flag("--json", args->json, "JSON output");
      sub.add_option("--lookahead", args->lookahead, "Next-layer experts prefetched per MoE layer (-1 = automatic)")
          ->type_name("EXPERTS")
          ->check(int_range("--lookahead", -1, 64));
      sub.add_option("--prefill-chunk", args->prefill_chunk, "Prompt tokens per prefill call (1 = token by token)")
          ->type_name("TOKENS")
          ->check(int_range("--prefill-chunk", 1, sizing::kMaxPrefillChunk));
      sub.add_option("--prefill-matmul", args->prefill_matmul,
                     "Prompt tokens' experts by matrix products: on (the default), off (lookup tables, as decode) "
                     "or a token count (experts routed to >= N tokens of a pass); when not given, $WASTE_PREFILL_MATMUL "
                     "decides, and on when that is unset too")
          ->type_name("on|off|N")
          ->default_str("on");
      sub.add_option("--prefill-int8", args->prefill_int8,
                     "Prompt tokens' trunk projections (Q4G matrices) by int8 products: on (the default) or off "
                     "(f32, as decode); when not given, $WASTE_PREFILL_INT8 decides, and on when that is unset too")
          ->type_name("on|off")
          ->default_str("on");
      sub.add_option("--decode-int8", args->decode_int8,
                     "Decode steps' trunk projections (Q4G matrices) by int8 products: on or off (f32); when not "
                     "given, $WASTE_DECODE_INT8 decides, and when that is unset too, on where the CPU has AVX-512 VNNI")
          ->type_name("on|off")
          ->default_str(forward::int8_decode_enabled() ? "on" : "off");
      sub.add_option("--decode-head", args->decode_head,
                     "Which lm_head decode steps read under the int8 decode rule: q8 (the stored Q8G), q6 or q4 (a "
                     "6-bit or 4-bit copy made at open: 3/4 or 1/2 of the bytes per token, within a bound: "
                     "docs/QUALITY.md); when not given, $WASTE_DECODE_HEAD decides, and when that is unset too, " +
                         std::string(forward::head_mode_name(forward::default_head_mode())))
          ->type_name("q8|q6|q4")
          ->default_str(std::string(forward::head_mode_name(forward::default_head_mode())));
      sub.add_option("--lut", args->lut,
                     "How decode looks up 8-bit-index experts (VQ3R): f32 tables or q16 (int16 tables from "
                     "registers, within a bound: docs/QUALITY.md); when not given, $WASTE_LUT decides, and when that "
                     "is unset too the CPU: q16 where the kernels have a vector q16 apply (AVX-512 VBMI), else f32")
          ->type_name("f32|q16")
          ->default_str("cpu");
      sub.add_option("--engram-readahead", args->engram_readahead,
                     "DeepSeek-V4.1 Engram rows requested ahead of their layer (on) or read only when the layer "
                     "asks (off; same logits); when not given, $WASTE_ENGRAM_READAHEAD decides (0 = off), and on "
                     "when that is unset too. With Engram tables the report adds per phase: rows asked, cache hit %, "
                     "pages and bytes read, the wait for rows and the requests ahead, per token, and where the rows "
                     "come from")
          ->type_name("on|off")
          ->default_str("on");
      sub.add_flag("--profile", args->profile, "Per-stage timings of prefill and decode");
      sub.add_flag("--compute-only", args->compute_only, "Read every expert at open: decode measures compute alone");
      sub.add_flag("--embedding-on-disk", args->embedding_on_disk,
                   "Read one embed_tokens row from trunk.bin per token even when the budget (or --compute-only) "
                   "would hold the table");
      sub.add_flag("--floor", args->floor,
                   "With --compute-only: measure this machine's compute floor per stage and compare the step with it");
      sub.add_option("--record-trace", args->record_trace, "Write the run's expert requests to FILE")
          ->type_name("FILE")
          ->default_str("none");
      sub.add_flag("--io-only", args->io_only, "Replay --trace through waste-ioserver with no compute");
      sub.add_option("--trace", args->trace, "Expert trace to replay (--io-only)")->type_name("FILE")->default_str("none");
      sub.add_option("--passes", args->passes, "--io-only: times the trace is replayed")
          ->type_name("N")
          ->check(int_range("--passes", 1, 1000));
      sub.add_option("--clients", args->clients, "Run N bench processes at once on one waste-ioserver (0 = one, in this process)")
          ->type_name("N")
          ->check(int_range("--clients", 0, 64));
      sub.add_option("--sweep", args->sweep,
                     "Run the workload at each budget (sizes, e.g. 500M,1G,2G), a fresh process each")
          ->type_name("SIZES")
          ->default_str("none")
          ->check(byte_size_list("--sweep"));
      sub.add_option("--sweep-md", args->sweep_md, "--sweep: write the markdown table to FILE")
          ->type_name("FILE")
          ->default_str("none");
      sub.add_option("--sweep-png", args->sweep_png, "--sweep: plot decode tok/s and hit rate to FILE (gnuplot)")
          ->type_name("FILE")
          ->default_str("none");
      sub.add_option("--policy-sim", args->policy_sim,
                     "Replay a routing trace (JSON lines) through the daemon's cache policies and Belady's "
                     "optimum; no MODEL")
          ->type_name("TRACE")
          ->default_str("none");
      sub.add_option("--capacity", args->capacity,
                     "--policy-sim: cache sizes, slots (416) or multiples of the working set (0.5x)")
          ->type_name("LIST")
          ->default_str("0.5x,1x,2x,4x,8x");
      sub.add_option("--sim-lookahead", args->sim_lookahead,
                     "--policy-sim: also simulate prefetching N next-layer experts per layer")
          ->type_name("N")
          ->check(int_range("--sim-lookahead", 0, 64));
      sub.add_option("--sim-wrong", args->sim_wrong, "--policy-sim: of the N, how many the next layer does not use")
          ->type_name("N")
          ->check(int_range("--sim-wrong", 0, 64));
      sub.add_option("--sim-clients", args->sim_clients,
                     "--policy-sim: split the trace among N clients whose walks interleave on one cache")
          ->type_name("N")
          ->default_str("1")
          ->check(int_range("--sim-clients", 1, 64));
      sub.add_option("--streams", args->streams,
                     "Decode N sequences in lockstep through the engine's batch feed (waste serve's batching, no "
                     "HTTP), for each count given (e.g. 1,2,4,8): aggregate tok/s, ms per pass, --profile per pass")
          ->type_name("LIST")
          ->default_str("none");
      sub.add_option("--positions", args->positions,
                     "Decode -n tokens starting at each context position (e.g. 64,4000), interleaved over --rounds")
          ->type_name("LIST")
          ->default_str("none");
      sub.add_option("--context-fill", args->context_fill,
                     "--positions: replicate (copy the prompt's latent rows up to the position) or prefill (feed "
                     "real tokens)")
          ->type_name("HOW")
          ->check(CLI::IsMember({"replicate", "prefill"}));
      sub.add_option("--policy", args->daemon_policy, "--io-only: the daemon's cache policy (echo, reuse, lfru, lru)")
          ->type_name("NAME")
          ->default_str("the daemon's")
          ->check(CLI::IsMember({"echo", "reuse", "lfru", "lru"}));
      sub.add_flag("--reader-sweep", args->reader_sweep,
                   "Read random expert records with fio, the pread pool and io_uring at each --depths; GB/s and % of fio");
      sub.add_option("--depths", args->depths, "--reader-sweep: queue depths (reader threads)")
          ->type_name("LIST")
          ->default_str("1,2,4,8,16");
      sub.add_option("--run-bytes", args->run_bytes, "--reader-sweep: bytes each reader reads at each depth")
          ->type_name("SIZE")
          ->default_str("1G");
      sub.add_flag("--no-fio", args->no_fio, "--reader-sweep: skip the fio ceiling");
      sub.add_option("--rounds", args->rounds,
                     "--positions: interleaved rounds (the best reported); --reader-sweep: rounds over every depth "
                     "(each figure their median)")
          ->type_name("N")
          ->default_str("3 with --positions, 1 with --reader-sweep")
          ->check(int_range("--rounds", 1, 100));
      sub.add_flag("--drop-caches", args->drop_caches, "--sweep: drop the page cache before each run (root)");
      return [args] { return run_bench(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
