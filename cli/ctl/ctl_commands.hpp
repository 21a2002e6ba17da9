// waste-ctl subcommands: each returns the process exit code and reports on stdout/stderr.
#pragma once

#include <optional>
#include <string>

#include "ioserver/options/daemon_options.hpp"

namespace waste::ctl {

// Start a daemon with `options` (the same set waste-ioserver takes: add_daemon_options) and wait
// until it is ready.
int start(const ioserver::DaemonOptions& options);
int stop(const std::string& target, int drain_ms);
int status();
int stats(const std::string& target, bool json, bool watch, double interval_s, int count);
int cleanup();

}  // namespace waste::ctl
