// waste-ctl subcommands: each returns the process exit code and reports on stdout/stderr.
#pragma once

#include <optional>
#include <string>

namespace waste::ctl {

struct StartArgs {
  std::string model;
  std::string budget;      // empty = automatic
  std::string name;        // empty = derived
  std::string policy;      // empty = daemon default
  int clients = 0;         // 0 = daemon default
  bool no_direct_io = false;
  std::string log;
};

int start(const StartArgs& args);
int stop(const std::string& target, int drain_ms);
int status();
int stats(const std::string& target, bool json, bool watch, double interval_s, int count);
int cleanup();

}  // namespace waste::ctl
