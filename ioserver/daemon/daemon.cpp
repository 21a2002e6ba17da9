// The daemon's lifecycle (daemon.hpp): init, the run loop (control requests, signals, reclaim,
// auto-exit), drain and teardown. Set-up before the fork is setup.cpp, the budget
// machine_budget.cpp, the request handlers ioserver/control/control_protocol.cpp.
#include "ioserver/daemon/daemon.hpp"

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "ioserver/control/control_socket.hpp"
#include "ioserver/daemon/machine_budget.hpp"
#include "ioserver/daemon/process_setup.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/memory/machine_ledger.hpp"

namespace waste::ioserver {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kReclaimEvery{200};
constexpr std::chrono::milliseconds kPollTimeout{100};

}  // namespace

Daemon::Daemon(DaemonSetup setup)
    : setup_(std::move(setup)), ledger_(ledger_shape(setup_)), policy_(cache_policy_name(setup_.options.io.policy)) {}

Result<std::unique_ptr<Daemon>> Daemon::init(DaemonSetup setup, const DataPlaneFactory& factory) {
  // After the fork: the ledger entry carries the daemon's own pid.
  if (auto st = register_machine_budget(setup); !st) {
    if (setup.instance_lock) setup.instance_lock->unlink_and_release();
    return std::unexpected(st.error());
  }
  std::unique_ptr<Daemon> d(new Daemon(std::move(setup)));
  d->registered_ = true;
  const DaemonOptions& opt = d->setup_.options;
  const std::string& instance = d->setup_.instance;

  auto dir = ipc::ensure_runtime_dir();
  if (!dir) return std::unexpected(dir.error());
  const fs::path log_file = opt.log_file.empty() ? ipc::default_log_path(instance) : fs::absolute(opt.log_file);
  auto log = open_daemon_log(log_file, opt.log_to_stderr);
  if (!log) return std::unexpected(log.error());
  d->log_ = std::move(*log);
  for (const auto& what : d->setup_.cleaned) d->log_->info("removed stale {}", what);

  // Block the signals before any data-plane thread exists, so they all inherit the mask and
  // the signals arrive only through the signalfd in the poll loop.
  if (opt.handle_signals) {
    auto fd = block_stop_signals();
    if (!fd) return std::unexpected(fd.error());
    d->signal_fd_ = *fd;
  }
  d->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (d->wake_fd_ < 0) return make_error(Errc::io, std::string("eventfd: ") + std::strerror(errno));

  IoServerConfig pc = opt.io;
  pc.container = d->setup_.model;
  pc.instance = instance;
  pc.arena_slots = d->setup_.arena_slots;
  pc.private_memory = false;  // clients in other processes map it by name
  auto plane = factory(pc);
  if (!plane) return std::unexpected(plane.error().with_context(d->setup_.model.string()));
  d->plane_ = std::move(*plane);

  const fs::path sock = ipc::socket_path(instance);
  const std::string endpoint = ipc::socket_endpoint(instance);
  try {
    d->sockets_ = std::make_unique<ControlSocket>();
    d->sockets_->rep.set(zmq::sockopt::linger, 0);
    d->sockets_->rep.bind(endpoint);
  } catch (const zmq::error_t& e) {
    d->plane_->stop();
    return make_error(Errc::ipc, endpoint + ": cannot bind: " + e.what());
  }
  // Only this user may talk to the daemon (the directory is 0700 as well).
  if (::chmod(sock.c_str(), 0600) != 0) {
    d->plane_->stop();
    return make_error(Errc::io, sock.string() + ": chmod 0600: " + std::strerror(errno));
  }

  ipc::DaemonInfo& info = d->info_;
  info.pid = ::getpid();
  info.instance = instance;
  info.model = d->setup_.model.string();
  info.socket = endpoint;
  info.budget_bytes = d->setup_.budget.budget_bytes;
  info.arena_slots = d->setup_.arena_slots;
  info.log = log_file.string();
  info.protocol = ipc::kProtocolVersion;
  if (auto st = ipc::write_daemon_info(info); !st) {
    d->plane_->stop();
    return std::unexpected(st.error());
  }
  d->log_->info("serving {} as {} on {}: budget {} ({}), floor {}, arena {} slots of {}", info.model, instance,
                endpoint, format_bytes(info.budget_bytes),
                d->setup_.budget.explicit_budget    ? std::string("given")
                : d->setup_.budget.whole_expert_set ? "the whole expert set, " +
                                                          std::to_string(d->setup_.plan.expert_records) + " records"
                                                    : "floor + " + std::to_string(d->setup_.budget.working_sets) +
                                                          " working sets",
                format_bytes(d->setup_.plan.floor_bytes), info.arena_slots,
                format_bytes(d->setup_.plan.max_record_bytes));
  d->log_->info("data plane: {} cache, {} reader threads, direct I/O {}, CRC verify {}, at most {} clients, "
                "background fill {}",
                cache_policy_name(opt.io.policy), opt.io.reader_threads, opt.io.direct_io ? "asked" : "off",
                opt.io.verify_crc ? "on" : "off", opt.io.max_clients,
                !opt.io.fill                                                    ? "off"
                : d->setup_.arena_slots >= d->setup_.plan.expert_records ? "on (the arena holds every record)"
                                                                           : "on (idle: the arena holds fewer than every record)");
  if (opt.io.io_uring) {
    // The data plane falls back to pread where the kernel (or a seccomp filter) refuses io_uring.
    const auto totals = d->plane_->stats().value("totals", nlohmann::json::object());
    if (totals.value("io_uring", false)) {
      d->log_->info("reading records through io_uring");
    } else {
      d->log_->warn("--io-uring: io_uring is not available here (io_uring_queue_init failed); reading with pread");
    }
  }
  d->cache_slots_ = d->ledger_.usable_slots();
  d->base_budget_ = d->ledger_.budget_bytes();
  d->idle_since_ = Clock::now();
  if (opt.linger) {
    d->log_->info("auto-exit: {} ms after the last client leaves ({} ms for the first to attach)", opt.linger->count(),
                  std::max(*opt.linger, opt.first_attach_grace).count());
  }
  if (d->setup_.budget.above_cap) {
    d->log_->warn("budget {} leaves under 1/4 of usable RAM to the OS: it will page out the expert cache",
                  format_bytes(info.budget_bytes));
  }
  return d;
}

Daemon::~Daemon() {
  teardown();
  if (signal_fd_ >= 0) ::close(signal_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Daemon::stop() noexcept {
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }
}

void Daemon::begin_drain(std::chrono::milliseconds drain) {
  if (!draining_) {
    log_->info("shutting down: draining {} client(s) for up to {} ms", clients_.clients().size(), drain.count());
    // Discovery reads info files: from now on none leads here. The instance lock, held until
    // teardown ends, keeps a successor from starting over our files meanwhile.
    std::error_code ec;
    fs::remove(ipc::info_path(info_.instance), ec);
  }
  draining_ = true;
  drain_deadline_ = Clock::now() + drain;
}

void Daemon::check_linger(Clock::time_point now) {
  const auto& linger = setup_.options.linger;
  if (!linger || draining_ || !clients_.empty()) return;
  // Before the first attach the starter may still be on its way (a loaded machine).
  const auto limit = ever_attached_ ? *linger : std::max(*linger, setup_.options.first_attach_grace);
  if (now - idle_since_ < limit) return;
  log_->info("no client for {} ms: exiting", std::chrono::duration_cast<std::chrono::milliseconds>(limit).count());
  begin_drain(std::chrono::milliseconds(0));
}

Status Daemon::run() {
  zmq::pollitem_t items[3] = {
      {sockets_->rep.handle(), 0, ZMQ_POLLIN, 0},
      {nullptr, wake_fd_, ZMQ_POLLIN, 0},
      {nullptr, signal_fd_, ZMQ_POLLIN, 0},
  };
  const int n_items = signal_fd_ >= 0 ? 3 : 2;
  auto next_reclaim = Clock::now() + kReclaimEvery;
  for (;;) {
    try {
      zmq::poll(items, n_items, kPollTimeout);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) {
        log_->error("poll: {}", e.what());
        break;
      }
    }
    if (items[0].revents & ZMQ_POLLIN) {
      zmq::message_t msg;
      try {
        if (sockets_->rep.recv(msg, zmq::recv_flags::dontwait)) {
          const json reply = handle(msg.to_string(), peer_of(msg));
          sockets_->rep.send(zmq::buffer(reply.dump()), zmq::send_flags::none);
        }
      } catch (const zmq::error_t& e) {
        log_->error("control socket: {}", e.what());
      }
    }
    if (items[1].revents & ZMQ_POLLIN) {
      std::uint64_t count = 0;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof count);
      begin_drain(std::chrono::milliseconds(0));
    }
    if (n_items == 3 && (items[2].revents & ZMQ_POLLIN)) {
      signalfd_siginfo si{};
      while (::read(signal_fd_, &si, sizeof si) == ssize_t(sizeof si)) {
        if (si.ssi_signo == SIGHUP) {
          log_->info("SIGHUP: nothing to reload (use `waste-ctl` config)");
        } else {
          log_->info("signal {}: stopping", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
          begin_drain(std::chrono::milliseconds(2000));
        }
      }
    }
    const auto now = Clock::now();
    if (now >= next_reclaim) {
      reclaim();
      next_reclaim = now + kReclaimEvery;
    }
    check_linger(now);
    if (draining_ && (clients_.empty() || now >= drain_deadline_)) break;
  }
  clean_stop_ = true;
  teardown();
  return ok();
}

void Daemon::drop_client(int client_idx, const char* why) {
  const auto it = clients_.clients().find(client_idx);
  const int pid = it == clients_.clients().end() ? 0 : it->second.pid;
  // By the lease's pid and generation: a data-plane slot already reused by someone else stays.
  const Status detached = it == clients_.clients().end()
                              ? plane_->detach(client_idx)
                              : plane_->detach(client_idx, it->second.pid, it->second.generation);
  if (auto st = detached; !st) {
    // The data plane may have reclaimed a dead pid already; the ledger must still let go.
    log_->debug("detach client {}: {}", client_idx, st.error().message);
  }
  ledger_.release(client_idx);
  clients_.remove(client_idx);
  shrink_budget_to_clients();
  if (auto st = apply_cache_slots(); !st) log_->warn("expert cache: {}", st.error().message);
  if (clients_.empty()) idle_since_ = Clock::now();
  log_->info("client {} (pid {}) {}; budget used {} of {}", client_idx, pid, why, format_bytes(ledger_.used_bytes()),
             format_bytes(ledger_.budget_bytes()));
}

void Daemon::reclaim() {
  plane_->reclaim_dead_clients();
  // Only a dead process is reclaimed (pid + start time): a live client that is slow, paged out
  // or SIGSTOPped may still read slot bytes, so its pins stay however late its heartbeat is.
  const auto dead = clients_.dead([](int pid, std::uint64_t start_ticks) { return ipc::process_alive(pid, start_ticks); });
  for (int idx : dead) drop_client(idx, "died: reclaimed");
}

void Daemon::teardown() noexcept {
  if (torn_down_) return;
  torn_down_ = true;
  try {
    if (plane_) {
      std::vector<int> left;
      for (const auto& [idx, entry] : clients_.clients()) left.push_back(idx);
      for (int idx : left) drop_client(idx, "detached at shutdown");
      plane_->stop();
      plane_.reset();   // the data plane removes its shared memory
    }
    // The last reply (a detach that ended the drain, a shutdown) may still be queued: give it
    // a moment to leave instead of dropping it with linger 0 (seen under TSan's slowdown).
    if (sockets_) sockets_->rep.set(zmq::sockopt::linger, 200);
    sockets_.reset();
    if (!info_.instance.empty()) {
      // Whatever the data plane left (and our own socket and info file) goes too.
      for (const auto& what : ipc::remove_instance_files(info_.instance)) {
        if (log_) log_->debug("removed {}", what);
      }
    }
    if (registered_) MachineLedger(ipc::machine_ledger_path()).remove(setup_.instance, ::getpid());
    if (log_) log_->info("stopped");
    // A clean stop of a daemon asked to leave nothing behind: its log goes too (before the
    // lock is released, so a successor's log of the same name is never the one removed).
    if (clean_stop_ && setup_.options.remove_log_on_clean_stop && !info_.log.empty()) {
      log_.reset();
      std::error_code ec;
      fs::remove(info_.log, ec);
    }
    if (setup_.instance_lock) setup_.instance_lock->unlink_and_release();
  } catch (...) {
    // Teardown runs from destructors; nothing may escape.
  }
}

}  // namespace waste::ioserver
