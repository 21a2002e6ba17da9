// waste-ioserver MODEL: parse, resolve the budget, daemonize, serve. Everything else lives in
// the Daemon class (daemon.hpp).
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "ioserver/control/daemonize.hpp"
#include "ioserver/control/data_plane.hpp"
#include "ioserver/daemon.hpp"
#include "shared/ipc/runtime_dir.hpp"

int main(int argc, char** argv) {
  using namespace waste;
  using namespace waste::ioserver;
  CLI::App app{"waste-ioserver: serves one WASTE container's experts to every local process"};
  DaemonOptions options;
  std::string model;
  std::string budget_text;
  std::string log_file;
  bool foreground = false;
  bool no_direct_io = false;
  app.add_option("MODEL", model, "container directory")->required();
  app.add_option("--budget", budget_text, "RAM budget for trunk + expert arena + client state (e.g. 8G); default: automatic");
  app.add_option("--name", options.instance, "instance name (default: derived from the container path)");
  app.add_option("--policy", options.policy, "expert cache policy")->check(CLI::IsMember({"lfru", "lru"}));
  app.add_flag("--foreground", foreground, "stay attached to the terminal");
  app.add_option("--log", log_file, "log file (default: <runtime dir>/waste-<name>.log)");
  app.add_option("--reader-threads", options.reader_threads, "disk reader threads")->check(CLI::Range(1, 64));
  app.add_flag("--no-direct-io", no_direct_io, "read through the page cache");
  app.add_flag("--io-uring", options.io_uring, "read records through io_uring (pread if the kernel refuses it)");
  app.add_flag("--verify", options.verify_crc, "check every record's CRC on read");
  app.add_option("--clients", options.reserved_clients, "clients whose state the budget reserves room for")
      ->check(CLI::Range(1, 64));
  app.add_option("--max-clients", options.max_clients, "most clients attached at once")->check(CLI::Range(1, 64));
  bool no_populate = false;
  app.add_flag("--no-populate", no_populate, "leave arena pages to be faulted in by the reads (no idle-time pre-fault)");
  app.add_flag("--remove-log-on-stop", options.remove_log_on_clean_stop,
               "delete the log file when the daemon stops cleanly (kept when it fails)");
  int linger_ms = -1;
  app.add_option("--linger", linger_ms,
                 "auto-exit: stop this many ms after the last client leaves (what `waste` commands start; "
                 "default: stay until stopped)")
      ->check(CLI::Range(0, 3600000));
  int grace_ms = -1;
  app.add_option("--first-attach-grace", grace_ms, "auto-exit: how long to wait for the first client (ms, default 10000)")
      ->check(CLI::Range(0, 3600000));
  CLI11_PARSE(app, argc, argv);
  if (linger_ms >= 0) options.linger = std::chrono::milliseconds(linger_ms);
  if (grace_ms >= 0) options.first_attach_grace = std::chrono::milliseconds(grace_ms);

  options.model = model;
  options.direct_io = !no_direct_io;
  options.populate_arena = !no_populate;
  // Absolute now: the daemon changes to "/" before it opens the log.
  if (!log_file.empty()) options.log_file = std::filesystem::absolute(log_file);
  options.log_to_stderr = foreground;
  if (!budget_text.empty()) {
    auto bytes = parse_bytes(budget_text);
    if (!bytes) {
      std::fprintf(stderr, "waste-ioserver: --budget: %s\n", bytes.error().message.c_str());
      return 2;
    }
    options.budget_bytes = *bytes;
  }

  // Decided before forking, so a bad budget or a running twin is reported on this terminal.
  auto setup = resolve_setup(options);
  if (!setup) {
    std::fprintf(stderr, "waste-ioserver: %s\n", setup.error().message.c_str());
    return 1;
  }

  const std::filesystem::path log_path =
      options.log_file.empty() ? ipc::default_log_path(setup->instance) : std::filesystem::absolute(options.log_file);
  ReadinessPipe readiness;
  if (!foreground) {
    auto outcome = daemonize(std::chrono::minutes(10), log_path.string());
    if (!outcome) {
      std::fprintf(stderr, "waste-ioserver: %s\n", outcome.error().message.c_str());
      return 1;
    }
    if (!outcome->is_daemon) return outcome->exit_code;
    readiness = std::move(outcome->readiness);
  }

  auto daemon = Daemon::init(std::move(*setup), make_io_server_plane);
  if (!daemon) {
    // The log (when it was opened) is kept and gets the reason; the error says where it is.
    std::string message = daemon.error().message;
    std::error_code ec;
    if (std::filesystem::exists(log_path, ec)) {
      if (std::FILE* f = std::fopen(log_path.c_str(), "ae")) {
        std::fprintf(f, "[error] start-up failed: %s\n", message.c_str());
        std::fclose(f);
      }
      message += " (its log: " + log_path.string() + ")";
    }
    readiness.failed(message);
    std::fprintf(stderr, "waste-ioserver: %s\n", message.c_str());
    return 1;
  }
  const auto& info = (*daemon)->info();
  readiness.ready("waste-ioserver " + info.instance + " (pid " + std::to_string(info.pid) + ") on " + info.socket +
                  ", budget " + format_bytes(info.budget_bytes));
  try {
    if (auto st = (*daemon)->run(); !st) {
      std::fprintf(stderr, "waste-ioserver: %s\n", st.error().message.c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "waste-ioserver: %s\n", e.what());
    return 1;
  }
  // A clean stop: teardown (in run) logged "stopped" and, with --remove-log-on-stop, removed
  // the log before releasing the instance lock. Any failure above keeps the log for the user.
  (*daemon).reset();
  return 0;
}
