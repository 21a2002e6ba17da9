// waste-ctl: start, stop and inspect waste-ioserver daemons.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "cli/ctl/ctl_commands.hpp"
#include "ioserver/options/daemon_cli.hpp"

int main(int argc, char** argv) {
  CLI::App app{"waste-ctl: manage waste-ioserver daemons (one per container)"};
  app.require_subcommand(1);

  // The daemon's own option set (ioserver/control/daemon_cli.hpp): the same as waste-ioserver's.
  waste::ioserver::DaemonCli start_cli;
  auto* start = app.add_subcommand("start", "start a daemon for MODEL and wait until it is ready");
  waste::ioserver::add_daemon_options(*start, start_cli);

  std::string stop_target;
  int drain_ms = 2000;
  auto* stop = app.add_subcommand("stop", "drain and stop a daemon (removes its shared memory and socket)");
  stop->add_option("TARGET", stop_target, "instance name or container (default: the only running daemon)");
  stop->add_option("--drain-ms", drain_ms, "how long attached clients get to detach");

  auto* status = app.add_subcommand("status", "running daemons, their clients and budget use");

  std::string stats_target;
  bool as_json = false;
  bool watch = false;
  double interval_s = 1.0;
  int count = 0;
  auto* stats = app.add_subcommand("stats", "cache and I/O statistics, per client and total");
  stats->add_option("TARGET", stats_target, "instance name or container (default: the only running daemon)");
  stats->add_flag("--json", as_json, "print the daemon's JSON reply");
  stats->add_flag("--watch", watch, "repeat until interrupted");
  stats->add_option("--interval", interval_s, "seconds between --watch samples")->check(CLI::PositiveNumber);
  stats->add_option("--count", count, "with --watch: stop after N samples");

  auto* cleanup = app.add_subcommand("cleanup", "remove the files and shared memory of crashed daemons");

  CLI11_PARSE(app, argc, argv);
  if (start->parsed()) {
    auto options = waste::ioserver::daemon_options(start_cli);
    if (!options) {
      std::fprintf(stderr, "waste-ctl: %s\n", options.error().message.c_str());
      return 2;
    }
    return waste::ctl::start(*options);
  }
  if (stop->parsed()) return waste::ctl::stop(stop_target, drain_ms);
  if (status->parsed()) return waste::ctl::status();
  if (stats->parsed()) return waste::ctl::stats(stats_target, as_json, watch, interval_s, count);
  if (cleanup->parsed()) return waste::ctl::cleanup();
  return 2;
}
