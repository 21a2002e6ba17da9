// The CLI's names for the library's daemon attach path (compute/io/daemon_attach.hpp), so the
// bench modes keep their spelling. Nothing is defined here.
#pragma once

#include "compute/io/daemon_attach.hpp"

namespace waste::cli::bench {

using waste::attach_daemon;
using waste::BenchDaemon;
using waste::daemon_arena_slots_of;
using waste::daemon_budget_of;
using waste::daemon_pid_of;
using waste::detach_daemon;
using waste::lease_of;
using waste::open_daemon_source;
using waste::open_daemon_trunk;

}  // namespace waste::cli::bench
