// The daemon's command-line options, defined once: waste-ioserver and `waste-ctl start` both
// register them with add_daemon_options, so the two take the same set with the same help. The
// range checks are done after parsing (daemon_options) so their messages are in words
// ("--max-clients must be between 1 and 64, not 65"). `waste-ctl start` hands the result back
// to waste-ioserver as arguments (daemon_argv).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ioserver/options/daemon_options.hpp"
#include "shared/result.hpp"

namespace waste::ioserver {

// What the command line holds before it becomes DaemonOptions (sizes and times as typed).
struct DaemonCli {
  std::string model;
  std::string budget;                 // "8G"; empty = automatic
  std::string engram_pool;  // --engram-pool: bytes with K/M/G; empty = automatic
  std::string name;
  std::string policy = "echo";
  std::string log_file;
  int reader_threads = kDefaultReaderThreads;
  int reserve_clients = 1;
  int max_clients = 16;
  bool no_direct_io = false;
  bool io_uring = false;
  bool verify = false;
  bool no_populate = false;
  std::string fill = "on";            // --fill on|off
  bool remove_log_on_stop = false;
  int linger_ms = -1;                 // -1: stay until stopped
  int first_attach_grace_ms = 10000;
  std::optional<int> old_clients;     // the removed --clients (hidden): refused with the new name
};

// MODEL (positional, required) and every daemon option. Not --foreground (waste-ioserver's own).
void add_daemon_options(CLI::App& app, DaemonCli& cli);

// Range checks and conversions. Errc::argument: "--reader-threads must be between 1 and 64, not 0",
// "--clients was renamed --reserve-clients", the budget text's parse error ("--budget: ...").
Result<DaemonOptions> daemon_options(const DaemonCli& cli);

// `options` as waste-ioserver arguments: MODEL (made absolute), then each option that differs
// from its default (log file absolute). daemon_options(parse(daemon_argv(o))) gives o back.
std::vector<std::string> daemon_argv(const DaemonOptions& options);

}  // namespace waste::ioserver
