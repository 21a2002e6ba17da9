// DaemonOptions: everything one waste-ioserver is started with. A plain struct, so the daemon
// (ioserver/daemon/), its command line (daemon_cli.hpp) and `waste-ctl start` share it without
// one linking the others.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>

#include "ioserver/io_server_config.hpp"
#include "shared/memory/ram.hpp"

namespace waste::ioserver {

// The daemon's options: the data plane's (one IoServerConfig; Daemon::init fills in the
// canonical container, the instance and arena_slots) plus what only the daemon has. The
// command-line form of all of them is add_daemon_options (ioserver/options/daemon_cli.hpp),
// shared by waste-ioserver and `waste-ctl start`.
struct DaemonOptions {
  // io.container = MODEL, io.instance: empty = derived; the daemon fills its arena in the
  // background by default (--fill on).
  IoServerConfig io = [] {
    IoServerConfig c;
    c.fill = true;
    return c;
  }();
  std::optional<std::uint64_t> budget_bytes;   // nullopt = automatic
  int reserved_clients = 1;                    // clients whose state the budget must hold
  bool remove_log_on_clean_stop = false;       // auto daemons: no log left behind unless they fail
  // Auto-exit (the daemon a `waste` command starts): drain this long after the last client
  // detached or was reclaimed; before the first attach, after max(linger, first_attach_grace).
  // nullopt: stay until stopped (`waste-ctl start`).
  std::optional<std::chrono::milliseconds> linger;
  std::chrono::milliseconds first_attach_grace{10000};
  // How long set-up waits for a predecessor of the same instance to finish its teardown.
  std::chrono::milliseconds predecessor_wait{10000};
  std::filesystem::path log_file;              // empty = <runtime dir>/waste-<instance>.log
  bool log_to_stderr = true;
  bool handle_signals = true;                  // false in in-process tests
  std::optional<UsableRam> ram;                // nullopt = this machine (tests pin it)
};

}  // namespace waste::ioserver
