#include "ioserver/options/daemon_cli.hpp"

#include <filesystem>

#include "shared/memory/budget.hpp"

namespace waste::ioserver {

namespace {

constexpr int kMaxLingerMs = 3600000;  // one hour

Status in_range(const char* option, long long value, long long lo, long long hi) {
  if (value >= lo && value <= hi) return ok();
  return make_error(Errc::argument, std::string(option) + " must be between " + std::to_string(lo) + " and " +
                                        std::to_string(hi) + ", not " + std::to_string(value));
}

}  // namespace

void add_daemon_options(CLI::App& app, DaemonCli& c) {
  app.add_option("MODEL", c.model, "container directory (NAME.waste)")->required();
  app.add_option("--budget", c.budget,
                 "RAM budget for trunk + expert arena + client state, in bytes with K/M/G (e.g. 8G; "
                 "default: automatic, the whole expert set, else the floor + 3 working sets, within 3/4 of usable RAM)");
  app.add_option("--engram-pool", c.engram_pool,
                 "Engram page pool, in bytes with K/M/G, 4K..4G, whole 4 KiB pages (default: min(64M, 5% of the "
                 "expert arena); only with engram-L<n>.bin tables in the container)");
  app.add_option("--name", c.name, "instance name (default: derived from the container path)");
  app.add_option("--policy", c.policy, "expert cache policy, echo, reuse, lfru or lru (default echo)")
      ->check(CLI::IsMember({"echo", "reuse", "lfru", "lru"}));
  app.add_option("--log", c.log_file, "log file (default: <runtime dir>/waste-<name>.log)");
  app.add_option("--reader-threads", c.reader_threads, "disk reader threads, 1..64 (default " + std::to_string(kDefaultReaderThreads) + ")");
  app.add_flag("--no-direct-io", c.no_direct_io, "read through the page cache (default: O_DIRECT where allowed)");
  app.add_flag("--io-uring", c.io_uring,
               "read records through io_uring (default: pread; pread also where the kernel refuses io_uring)");
  app.add_flag("--verify", c.verify, "check every record's CRC on read (default: off)");
  app.add_option("--reserve-clients", c.reserve_clients,
                 "clients whose state (cache, scratch) the budget reserves room for, 1..64 (default 1)");
  app.add_option("--max-clients", c.max_clients, "most clients attached at once, 1..64 (default 16)");
  // Renamed: it clashed with --max-clients. Hidden; daemon_options refuses it naming the new one.
  app.add_option("--clients", c.old_clients, "")->group("");
  app.add_flag("--no-populate", c.no_populate,
               "leave arena pages to be faulted in by the reads (default: pre-fault them at idle priority)");
  app.add_option("--fill", c.fill,
                 "read every expert record into the arena in the background, at low priority, when the arena "
                 "holds them all (on or off; default on)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_flag("--remove-log-on-stop", c.remove_log_on_stop,
               "delete the log file when the daemon stops cleanly (default: keep it; always kept on failure)");
  app.add_option("--linger", c.linger_ms,
                 "auto-exit: stop this many ms after the last client leaves, 0..3600000 "
                 "(default: stay until stopped; `waste` commands start theirs with one)");
  app.add_option("--first-attach-grace", c.first_attach_grace_ms,
                 "auto-exit: ms to wait for the first client, 0..3600000 (default 10000)");
}

Result<DaemonOptions> daemon_options(const DaemonCli& c) {
  if (c.old_clients) {
    return make_error(Errc::argument, "--clients was renamed --reserve-clients (clients whose state the budget "
                                      "reserves room for; --max-clients caps how many attach)");
  }
  WASTE_TRY(in_range("--reader-threads", c.reader_threads, 1, 64));
  WASTE_TRY(in_range("--reserve-clients", c.reserve_clients, 1, 64));
  WASTE_TRY(in_range("--max-clients", c.max_clients, 1, 64));
  if (c.linger_ms != -1) WASTE_TRY(in_range("--linger", c.linger_ms, 0, kMaxLingerMs));
  WASTE_TRY(in_range("--first-attach-grace", c.first_attach_grace_ms, 0, kMaxLingerMs));
  const auto policy = parse_cache_policy(c.policy);
  if (!policy) return make_error(Errc::argument, "--policy must be echo, reuse, lfru or lru, not '" + c.policy + "'");

  DaemonOptions o;
  o.io.container = c.model;
  o.io.instance = c.name;
  o.io.policy = *policy;
  o.io.reader_threads = c.reader_threads;
  o.io.direct_io = !c.no_direct_io;
  o.io.io_uring = c.io_uring;
  o.io.verify_crc = c.verify;
  o.io.max_clients = c.max_clients;
  o.io.populate_arena = !c.no_populate;
  if (c.fill != "on" && c.fill != "off") return make_error(Errc::argument, "--fill must be on or off, not '" + c.fill + "'");
  o.io.fill = c.fill == "on";
  o.reserved_clients = c.reserve_clients;
  o.remove_log_on_clean_stop = c.remove_log_on_stop;
  if (c.linger_ms >= 0) o.linger = std::chrono::milliseconds(c.linger_ms);
  o.first_attach_grace = std::chrono::milliseconds(c.first_attach_grace_ms);
  // Absolute now: the daemon changes to "/" before it opens the log.
  if (!c.log_file.empty()) o.log_file = std::filesystem::absolute(c.log_file);
  if (!c.budget.empty()) {
    auto bytes = parse_bytes(c.budget);
    if (!bytes) return make_error(Errc::argument, "--budget: " + bytes.error().message);
    o.budget_bytes = *bytes;
  }
  if (!c.engram_pool.empty()) {
    auto bytes = parse_bytes(c.engram_pool);
    if (!bytes) return make_error(Errc::argument, "--engram-pool: " + bytes.error().message);
    if (*bytes < 4096 || *bytes > (std::uint64_t{4} << 30)) {
      return make_error(Errc::argument, "--engram-pool must be between 4K and 4G, not " + c.engram_pool);
    }
    o.io.engram_pool_pages = *bytes / 4096;
  }
  return o;
}

std::vector<std::string> daemon_argv(const DaemonOptions& o) {
  const DaemonOptions d;  // the defaults
  std::error_code ec;
  std::vector<std::string> argv{std::filesystem::absolute(o.io.container, ec).string()};
  auto add = [&](const char* flag, const std::string& value) { argv.insert(argv.end(), {flag, value}); };
  if (o.budget_bytes) add("--budget", std::to_string(*o.budget_bytes));
  if (!o.io.instance.empty()) add("--name", o.io.instance);
  if (o.io.engram_pool_pages != 0) add("--engram-pool", std::to_string(o.io.engram_pool_pages * 4096));
  if (o.io.policy != d.io.policy) add("--policy", cache_policy_name(o.io.policy));
  if (!o.log_file.empty()) add("--log", std::filesystem::absolute(o.log_file, ec).string());
  if (o.io.reader_threads != d.io.reader_threads) add("--reader-threads", std::to_string(o.io.reader_threads));
  if (!o.io.direct_io) argv.emplace_back("--no-direct-io");
  if (o.io.io_uring) argv.emplace_back("--io-uring");
  if (o.io.verify_crc) argv.emplace_back("--verify");
  if (o.reserved_clients != d.reserved_clients) add("--reserve-clients", std::to_string(o.reserved_clients));
  if (o.io.max_clients != d.io.max_clients) add("--max-clients", std::to_string(o.io.max_clients));
  if (!o.io.populate_arena) argv.emplace_back("--no-populate");
  if (o.io.fill != d.io.fill) add("--fill", o.io.fill ? "on" : "off");
  if (o.remove_log_on_clean_stop) argv.emplace_back("--remove-log-on-stop");
  if (o.linger) add("--linger", std::to_string(o.linger->count()));
  if (o.first_attach_grace != d.first_attach_grace) {
    add("--first-attach-grace", std::to_string(o.first_attach_grace.count()));
  }
  return argv;
}

}  // namespace waste::ioserver
