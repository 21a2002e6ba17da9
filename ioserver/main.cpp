// waste-ioserver MODEL: parse, resolve the budget, daemonize, serve. Everything else lives in
// the Daemon class (daemon.hpp).
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "ioserver/options/daemon_cli.hpp"
#include "ioserver/control/daemonize.hpp"
#include "ioserver/control/data_plane.hpp"
#include "ioserver/daemon/daemon.hpp"
#include "shared/ipc/runtime_dir.hpp"

int main(int argc, char** argv) {
  using namespace waste;
  using namespace waste::ioserver;
  CLI::App app{"waste-ioserver: serves one WASTE container's experts to every local process"};
  DaemonCli cli;
  add_daemon_options(app, cli);
  bool foreground = false;
  app.add_flag("--foreground", foreground, "stay attached to the terminal, log to stderr too (default: daemonize)");
  CLI11_PARSE(app, argc, argv);
  auto parsed = daemon_options(cli);
  if (!parsed) {
    std::fprintf(stderr, "waste-ioserver: %s\n", parsed.error().message.c_str());
    return 2;
  }
  DaemonOptions options = std::move(*parsed);
  options.log_to_stderr = foreground;

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
