// `waste bench --clients N`: N bench processes decoding at once through one waste-ioserver.
// The parent starts the daemon (budget for N clients), spawns the children with --json (they attach to it: the daemon is the default),
// samples every process's memory from /proc/PID/smaps_rollup while they run, and reports the
// aggregate decode rate and memory per process and in total. PSS counts each shared page
// (arena, trunk image) once across the processes that map it, which is what "total RSS with
// shared memory counted once" means.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench/child_process.hpp"

namespace waste::cli::bench {

struct ClientRun {
  pid_t pid = 0;
  int rc = 0;
  nlohmann::json report;        // the child's bench --json document
  ProcessMemory peak;           // per field maximum over the samples
};

struct MultiClientReport {
  std::vector<ClientRun> clients;
  ProcessMemory daemon_peak;
  std::uint64_t peak_total_pss = 0;   // max over samples of sum(PSS) over clients + daemon
  std::uint64_t peak_total_rss = 0;   // same with RSS (counts shared pages once per process)
  std::uint64_t peak_total_private = 0;  // max of sum(RSS - shared) + the daemon's RSS
  double wall_seconds = 0;
  double daemon_cpu_seconds = 0;      // the daemon's user + system CPU while the clients ran
  int samples = 0;
  [[nodiscard]] double aggregate_decode_tps() const;   // sum of the clients' decode rates
  [[nodiscard]] double aggregate_prefill_tps() const;
};

struct MultiClientArgs {
  std::string model;
  std::string budget;
  int clients = 2;
  std::vector<std::string> child_args;   // workload options passed to each child
};

Result<MultiClientReport> run_multi_client(const MultiClientArgs& args);
nlohmann::json multi_client_json(const MultiClientReport& r);
void print_multi_client(const MultiClientReport& r);

}  // namespace waste::cli::bench
