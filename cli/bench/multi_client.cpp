#include "cli/bench/multi_client.hpp"

#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <thread>

#include "cli/bench/bench_daemon.hpp"
#include "cli/cli_common.hpp"

namespace waste::cli::bench {
namespace {

void keep_max(ProcessMemory& peak, const ProcessMemory& m) {
  peak.rss_bytes = std::max(peak.rss_bytes, m.rss_bytes);
  peak.pss_bytes = std::max(peak.pss_bytes, m.pss_bytes);
  peak.shared_bytes = std::max(peak.shared_bytes, m.shared_bytes);
}

nlohmann::json memory_json(const ProcessMemory& m) {
  return {{"rss_bytes", m.rss_bytes}, {"pss_bytes", m.pss_bytes}, {"shared_bytes", m.shared_bytes},
          {"private_bytes", m.private_bytes()}};
}

double sum_rate(const std::vector<ClientRun>& clients, const char* phase) {
  double total = 0;
  for (const auto& c : clients) {
    if (c.report.contains(phase)) total += c.report[phase].value("tokens_per_second", 0.0);
  }
  return total;
}

constexpr auto kSampleInterval = std::chrono::milliseconds(50);

}  // namespace

double MultiClientReport::aggregate_decode_tps() const { return sum_rate(clients, "decode"); }
double MultiClientReport::aggregate_prefill_tps() const { return sum_rate(clients, "prefill"); }

Result<MultiClientReport> run_multi_client(const MultiClientArgs& a) {
  if (a.clients < 1) return make_error(Errc::argument, "--clients must be at least 1");
  auto daemon = BenchDaemon::start(a.model, a.budget, a.clients);
  if (!daemon) return std::unexpected(daemon.error());
  if (!daemon->owned()) {
    std::fprintf(stderr, "waste bench: using the running waste-ioserver %s (its budget, not --budget)\n",
                 daemon->instance().c_str());
  }

  const auto dir = std::filesystem::temp_directory_path() / ("waste-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  MultiClientReport report;
  std::vector<std::filesystem::path> outputs;
  const auto start = std::chrono::steady_clock::now();
  const double daemon_cpu_start = read_process_cpu_seconds(daemon->pid()).value_or(0.0);
  for (int i = 0; i < a.clients; ++i) {
    std::vector<std::string> args{"bench", a.model, "--json"};  // the daemon is the default
    args.insert(args.end(), a.child_args.begin(), a.child_args.end());
    outputs.push_back(dir / ("client-" + std::to_string(i) + ".json"));
    auto pid = spawn_self(args, outputs.back());
    if (!pid) return std::unexpected(pid.error());
    ClientRun run;
    run.pid = *pid;
    report.clients.push_back(std::move(run));
  }

  // Sample until every child has exited: a child that is gone simply stops contributing.
  std::vector<bool> done(report.clients.size(), false);
  std::size_t remaining = report.clients.size();
  while (remaining > 0) {
    std::uint64_t pss = 0, rss = 0, priv = 0;
    bool all_alive = true;
    for (std::size_t i = 0; i < report.clients.size(); ++i) {
      if (done[i]) {
        all_alive = false;
        continue;
      }
      if (auto m = read_process_memory(report.clients[i].pid)) {
        keep_max(report.clients[i].peak, *m);
        pss += m->pss_bytes;
        rss += m->rss_bytes;
        priv += m->private_bytes();
      }
    }
    if (auto m = read_process_memory(daemon->pid())) {
      keep_max(report.daemon_peak, *m);
      pss += m->pss_bytes;
      rss += m->rss_bytes;
      priv += m->rss_bytes;  // the daemon's shared segments are counted here, once
    }
    if (all_alive) {
      report.peak_total_pss = std::max(report.peak_total_pss, pss);
      report.peak_total_rss = std::max(report.peak_total_rss, rss);
      report.peak_total_private = std::max(report.peak_total_private, priv);
    }
    ++report.samples;
    std::this_thread::sleep_for(kSampleInterval);
    for (std::size_t i = 0; i < report.clients.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      const pid_t got = ::waitpid(report.clients[i].pid, &status, WNOHANG);
      if (got == report.clients[i].pid) {
        report.clients[i].rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        done[i] = true;
        --remaining;
      }
    }
  }
  report.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.daemon_cpu_seconds = read_process_cpu_seconds(daemon->pid()).value_or(daemon_cpu_start) - daemon_cpu_start;
  for (std::size_t i = 0; i < report.clients.size(); ++i) {
    auto& c = report.clients[i];
    std::ifstream in(outputs[i]);
    std::ostringstream text;
    text << in.rdbuf();
    if (c.rc != 0) {
      return make_error(Errc::io, "bench client " + std::to_string(i) + " (pid " + std::to_string(c.pid) +
                                      ") exited with status " + std::to_string(c.rc));
    }
    try {
      c.report = nlohmann::json::parse(text.str());
    } catch (const std::exception& e) {
      return make_error(Errc::format, "bench client " + std::to_string(i) + " output is not JSON: " + e.what());
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  WASTE_TRY(daemon->stop());
  return report;
}

nlohmann::json multi_client_json(const MultiClientReport& r) {
  nlohmann::json clients = nlohmann::json::array();
  for (const auto& c : r.clients) {
    clients.push_back({{"pid", c.pid},
                       {"prefill_tokens_per_second", c.report["prefill"].value("tokens_per_second", 0.0)},
                       {"decode_tokens_per_second", c.report["decode"].value("tokens_per_second", 0.0)},
                       {"decode", c.report["decode"]},
                       {"peak_memory", memory_json(c.peak)},
                       {"end_memory", c.report.value("memory", nlohmann::json::object())}});
  }
  return {{"clients", clients},
          {"client_count", r.clients.size()},
          {"aggregate_decode_tokens_per_second", r.aggregate_decode_tps()},
          {"aggregate_prefill_tokens_per_second", r.aggregate_prefill_tps()},
          {"daemon_peak_memory", memory_json(r.daemon_peak)},
          {"peak_total_pss_bytes", r.peak_total_pss},
          {"peak_total_rss_bytes", r.peak_total_rss},
          {"peak_total_private_bytes", r.peak_total_private},
          {"wall_seconds", r.wall_seconds},
          {"daemon_cpu_seconds", r.daemon_cpu_seconds},
          {"memory_samples", r.samples}};
}

void print_multi_client(const MultiClientReport& r) {
  auto mb = [](std::uint64_t b) { return double(b) / 1e6; };
  std::printf("%-8s %8s %12s %12s %10s %10s %10s\n", "process", "pid", "prefill t/s", "decode t/s", "RSS MB",
              "PSS MB", "priv MB");
  for (std::size_t i = 0; i < r.clients.size(); ++i) {
    const auto& c = r.clients[i];
    std::printf("client%-2zu %8d %12.2f %12.2f %10.1f %10.1f %10.1f\n", i, int(c.pid),
                c.report["prefill"].value("tokens_per_second", 0.0), c.report["decode"].value("tokens_per_second", 0.0),
                mb(c.peak.rss_bytes), mb(c.peak.pss_bytes), mb(c.peak.private_bytes()));
  }
  std::printf("%-8s %8s %12s %12s %10.1f %10.1f %10s\n", "daemon", "", "", "", mb(r.daemon_peak.rss_bytes),
              mb(r.daemon_peak.pss_bytes), "");
  std::printf("aggregate decode %.2f tok/s  prefill %.2f tok/s  peak total PSS %.1f MB  RSS %.1f MB  wall %.1f s"
              "  daemon CPU %.1f s\n",
              r.aggregate_decode_tps(), r.aggregate_prefill_tps(), mb(r.peak_total_pss), mb(r.peak_total_rss),
              r.wall_seconds, r.daemon_cpu_seconds);
}

}  // namespace waste::cli::bench
