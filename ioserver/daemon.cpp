#include "ioserver/daemon.hpp"

#include "shared/container/container.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "shared/ipc/control_client.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/memory/machine_ledger.hpp"

namespace waste::ioserver {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kReclaimEvery{200};
constexpr std::chrono::milliseconds kPollTimeout{100};

}  // namespace

Result<DaemonSetup> resolve_setup(const DaemonOptions& options) {
  DaemonSetup setup;
  setup.options = options;
  // A path that is not a container gets the words every other reader gives (it names the path).
  if (auto text = read_manifest_text(options.io.container); !text) return std::unexpected(text.error());
  std::error_code ec;
  setup.model = fs::canonical(options.io.container, ec);
  if (ec) return make_error(Errc::io, options.io.container.string() + ": " + ec.message());
  if (!fs::is_directory(setup.model)) return make_error(Errc::format, setup.model.string() + ": not a container directory");

  if (!options.io.instance.empty()) {
    setup.instance = options.io.instance;
  } else {
    auto derived = ipc::instance_for_container(setup.model);
    if (!derived) return std::unexpected(derived.error());
    setup.instance = *derived;
  }
  WASTE_TRY(ipc::validate_instance_name(setup.instance));
  if (options.reserved_clients < 1) {
    return make_error(Errc::argument,
                      "--reserve-clients must be at least 1, not " + std::to_string(options.reserved_clients));
  }

  auto plan = plan_memory(setup.model);
  if (!plan) return std::unexpected(plan.error());
  // Each client beyond the first holds its own state and scratch next to the shared trunk.
  const std::uint64_t extra = std::uint64_t(options.reserved_clients - 1) * plan->client_bytes();
  plan->floor_bytes += extra;
  plan->recommended_bytes += extra;
  setup.plan = *plan;

  const UsableRam ram = options.ram ? *options.ram : usable_ram();
  auto budget = resolve_budget(setup.plan, options.budget_bytes, ram.cap_bytes);
  if (!budget) return std::unexpected(budget.error());
  setup.budget = *budget;
  setup.arena_slots = arena_slots(setup.plan, setup.budget.budget_bytes);

  setup.ram = ram;

  // One daemon per instance: a live one is an error, a crashed one's leftovers are removed.
  auto dir = ipc::ensure_runtime_dir();
  if (!dir) return std::unexpected(dir.error());
  const auto running = [&]() -> std::optional<Error> {
    if (auto info = ipc::read_daemon_info(ipc::info_path(setup.instance)); info && ipc::process_alive(info->pid, 0) &&
                                                                            info->pid != ::getpid()) {
      return Error{Errc::ipc, "waste-ioserver for " + setup.instance + " is already running (pid " +
                                  std::to_string(info->pid) + ", socket " + info->socket + ")"};
    }
    return std::nullopt;
  };
  if (auto e = running()) return std::unexpected(*e);
  // The lock is held by a daemon that is starting (its info file appears when it is ready) or
  // draining (its info file is already gone): wait for it, unless it turns out to be serving.
  const auto deadline = Clock::now() + options.predecessor_wait;
  for (;;) {
    auto lock = FileLock::try_acquire(ipc::lock_path(setup.instance));
    if (!lock) return std::unexpected(lock.error());
    if (*lock) {
      setup.instance_lock = std::make_shared<FileLock>(std::move(**lock));
      break;
    }
    if (auto e = running()) return std::unexpected(*e);
    if (Clock::now() >= deadline) {
      return make_error(Errc::ipc, "waste-ioserver for " + setup.instance + ": another daemon of this instance is " +
                                       "still starting or stopping after " +
                                       std::to_string(options.predecessor_wait.count()) + " ms (" +
                                       ipc::lock_path(setup.instance).string() + " is locked)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (auto e = running()) return std::unexpected(*e);
  setup.cleaned = ipc::remove_instance_files(setup.instance);
  return setup;
}

namespace {

// Registers the budget in the machine ledger under its lock; an automatic one is sized there
// against the cap minus what the other daemons hold (so two daemons never both size against
// the whole machine). Updates setup's budget and arena.
Status register_machine_budget(DaemonSetup& setup) {
  MachineLedger ledger(ipc::machine_ledger_path());
  const std::uint64_t cap = setup.ram.cap_bytes;
  const int pid = ::getpid();
  MachineLedgerEntry entry{setup.instance, setup.model.string(), pid, ipc::process_start_ticks(pid).value_or(0), 0};
  const bool explicit_budget = setup.budget.explicit_budget;
  auto registered = ledger.register_daemon(
      entry, cap, [&](std::uint64_t others, const std::vector<MachineLedgerEntry>& holders) -> Result<std::uint64_t> {
        if (explicit_budget || holders.empty()) return setup.budget.budget_bytes;
        const std::uint64_t free = cap > others ? cap - others : 0;
        if (cap != 0 && free < setup.plan.floor_bytes) {
          return make_error(Errc::ram_budget,
                            "no room for " + setup.model.string() + " under the machine cap " + format_bytes(cap) +
                                " (3/4 of usable RAM " + format_bytes(setup.ram.usable_bytes) +
                                "): other daemons hold " + format_bytes(others) + " (" + describe_holders(holders) +
                                "); its floor is " + format_bytes(setup.plan.floor_bytes) + ", at most " +
                                format_bytes(free) + " is free");
        }
        auto choice = resolve_budget(setup.plan, std::nullopt, cap == 0 ? 0 : free);
        if (!choice) return std::unexpected(choice.error());
        setup.budget = *choice;
        return choice->budget_bytes;
      });
  if (!registered) return std::unexpected(registered.error());
  setup.budget.budget_bytes = *registered;
  setup.budget.above_cap = cap != 0 && *registered > cap;
  setup.arena_slots = arena_slots(setup.plan, *registered);
  return ok();
}

LedgerShape ledger_shape(const DaemonSetup& setup) {
  LedgerShape shape;
  shape.container = setup.model.string();
  shape.budget_bytes = setup.budget.budget_bytes;
  shape.trunk_bytes = setup.plan.trunk_bytes;
  shape.record_bytes = setup.plan.max_record_bytes;
  shape.max_slots = setup.arena_slots;
  // 2·top_k records: the cache the plan's floor assumes (rounded up to whole slots).
  shape.floor_slots = shape.record_bytes == 0 ? 0
                                              : (setup.plan.min_expert_cache_bytes + shape.record_bytes - 1) /
                                                    shape.record_bytes;
  return shape;
}

}  // namespace

struct Daemon::Sockets {
  zmq::context_t context{1};
  zmq::socket_t rep{context, zmq::socket_type::rep};
};

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
  try {
    std::vector<spdlog::sink_ptr> sinks;
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file.string()));
    if (opt.log_to_stderr) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    d->log_ = std::make_shared<spdlog::logger>("waste-ioserver", sinks.begin(), sinks.end());
    d->log_->set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] %v");
    d->log_->flush_on(spdlog::level::info);
  } catch (const spdlog::spdlog_ex& e) {
    return make_error(Errc::io, log_file.string() + ": cannot open log: " + e.what());
  }
  for (const auto& what : d->setup_.cleaned) d->log_->info("removed stale {}", what);

  // Block the signals before any data-plane thread exists, so they all inherit the mask and
  // the signals arrive only through the signalfd in the poll loop.
  if (opt.handle_signals) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
    d->signal_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d->signal_fd_ < 0) return make_error(Errc::io, std::string("signalfd: ") + std::strerror(errno));
    ::signal(SIGPIPE, SIG_IGN);
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
    d->sockets_ = std::make_unique<Sockets>();
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
                d->setup_.budget.explicit_budget ? "given" : "floor + " + std::to_string(d->setup_.budget.working_sets) + " working sets",
                format_bytes(d->setup_.plan.floor_bytes), info.arena_slots,
                format_bytes(d->setup_.plan.max_record_bytes));
  d->log_->info("data plane: {} cache, {} reader threads, direct I/O {}, CRC verify {}, at most {} clients",
                cache_policy_name(opt.io.policy), opt.io.reader_threads, opt.io.direct_io ? "asked" : "off",
                opt.io.verify_crc ? "on" : "off", opt.io.max_clients);
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

std::uint64_t Daemon::budget_for(std::uint64_t extra_state) const noexcept {
  // The whole arena beside the trunk and every client's state, never under the start budget.
  return std::max(base_budget_, ledger_.trunk_bytes() + ledger_.max_slots() * ledger_.record_bytes() +
                                    ledger_.clients_bytes() + extra_state);
}

void Daemon::grow_budget_for(std::uint64_t state_bytes) {
  if (setup_.budget.explicit_budget || draining_) return;
  const std::uint64_t want = budget_for(state_bytes);
  if (want <= ledger_.budget_bytes()) return;
  if (auto st = MachineLedger(ipc::machine_ledger_path())
                    .update_budget(info_.instance, info_.pid, want, setup_.ram.cap_bytes, /*strict=*/true);
      !st) {
    log_->info("automatic budget stays {}: {}", format_bytes(ledger_.budget_bytes()), st.error().message);
    return;
  }
  if (!ledger_.set_budget(want)) return;
  info_.budget_bytes = want;
  (void)ipc::write_daemon_info(info_);
  log_->info("automatic budget raised to {} for a client's state of {}", format_bytes(want), format_bytes(state_bytes));
}

void Daemon::shrink_budget_to_clients() {
  if (setup_.budget.explicit_budget) return;
  const std::uint64_t want = budget_for(0);
  if (want >= ledger_.budget_bytes() || !ledger_.set_budget(want)) return;
  // Lowering never passes the cap; a failure to write leaves the larger figure (pruned later).
  (void)MachineLedger(ipc::machine_ledger_path()).update_budget(info_.instance, info_.pid, want, 0);
  info_.budget_bytes = want;
  if (!draining_) (void)ipc::write_daemon_info(info_);
}

Status Daemon::apply_cache_slots() {
  const std::uint64_t want = ledger_.usable_slots();
  if (want == cache_slots_) return ok();
  if (auto st = plane_->set_cache_slots(std::uint32_t(want)); !st) return st;
  log_->info("expert cache: {} of {} slots usable", want, ledger_.max_slots());
  cache_slots_ = want;
  return ok();
}

namespace {

// libzmq's "Peer-Address" of a message from an ipc:// peer ends in ":uid:gid:pid" (SO_PEERCRED).
std::optional<ipc::PeerCredentials> peer_of(zmq::message_t& msg) {
  try {
    const char* address = msg.gets("Peer-Address");
    return address != nullptr ? ipc::parse_peer_address(address) : std::nullopt;
  } catch (const zmq::error_t&) {
    return std::nullopt;   // no such property (a libzmq without SO_PEERCRED)
  }
}

}  // namespace

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

json Daemon::handle(const std::string& text, const std::optional<ipc::PeerCredentials>& peer) {
  auto request = ipc::parse_request(text);
  if (!request) return ipc::make_error_reply(request.error());
  // An exception may fail one request, never the daemon.
  try {
    const std::string& op = request->op;
    const json& body = request->body;
    if (op == "ping") {
      return ipc::make_ok(json{{"pid", info_.pid},
                               {"instance", info_.instance},
                               {"model", info_.model},
                               {"budget_bytes", ledger_.budget_bytes()},
                               {"protocol", ipc::kProtocolVersion},
                               {"clients", clients_.clients().size()},
                               {"draining", draining_},
                               {"auto_exit", setup_.options.linger.has_value()},
                               {"linger_ms", setup_.options.linger ? setup_.options.linger->count() : 0}});
    }
    if (op == "attach") return handle_attach(body, peer);
    if (op == "detach") return handle_detach(body);
    if (op == "heartbeat") return handle_heartbeat(body);
    if (op == "stats") return handle_stats();
    if (op == "config") return handle_config(body);
    if (op == "shutdown") return handle_shutdown(body);
    return ipc::make_error_reply(Error{Errc::argument, "unknown op '" + op + "'"});
  } catch (const std::exception& e) {
    log_->error("request {}: {}", request->op, e.what());
    return ipc::make_error_reply(Error{Errc::format, request->op + ": " + e.what()});
  }
}

json Daemon::handle_attach(const json& body, const std::optional<ipc::PeerCredentials>& peer) {
  auto req = ipc::attach_request_from_json(body);
  if (!req) return ipc::make_error_reply(req.error());
  // The lease is the kernel's pid's: reclaim watches it, so a client naming another process
  // (by mistake or to have someone else's death free its pins) is refused, not believed.
  if (!peer) {
    log_->warn("attach refused: no peer credentials");
    return ipc::make_error_reply(Error{Errc::ipc, "attach refused: the kernel did not name the connecting process "
                                                  "(no SO_PEERCRED on this control socket)"});
  }
  if (req->pid != peer->pid) {
    const Error lie{Errc::argument, "attach refused: the request names pid " + std::to_string(req->pid) +
                                       ", the connecting process is pid " + std::to_string(peer->pid) +
                                       " (SO_PEERCRED)"};
    log_->warn("{}", lie.message);
    return ipc::make_error_reply(lie);
  }
  if (draining_) {
    return ipc::make_error_reply(Error{ipc::kDrainingCode, "waste-ioserver " + info_.instance + " is draining (shutting down): attach refused"});
  }
  // Admission first, so a refused client never touches the data plane. An automatic budget
  // grows by the client's state within the machine cap; otherwise (or past the cap) room is
  // made by shrinking the expert cache toward its floor; only below the floor is it refused.
  grow_budget_for(req->state_bytes);
  if (auto st = ledger_.can_admit(req->pid, req->state_bytes); !st) {
    log_->warn("pid {}: {}", req->pid, st.error().message);
    return ipc::make_error_reply(st.error());
  }
  auto lease = plane_->attach(req->pid);
  if (!lease) return ipc::make_error_reply(lease.error());
  if (auto slots = ledger_.admit(lease->client_idx, req->pid, req->state_bytes); !slots) {
    (void)plane_->detach(lease->client_idx);
    return ipc::make_error_reply(slots.error());
  }
  if (auto st = apply_cache_slots(); !st) {
    (void)plane_->detach(lease->client_idx);
    ledger_.release(lease->client_idx);
    return ipc::make_error_reply(st.error().with_context("expert cache"));
  }
  ClientEntry entry;
  entry.client_idx = lease->client_idx;
  entry.pid = req->pid;
  entry.start_ticks = req->start_ticks != 0 ? req->start_ticks : ipc::process_start_ticks(req->pid).value_or(0);
  entry.generation = lease->extra.value("generation", std::uint64_t{0});
  entry.state_bytes = req->state_bytes;
  entry.last_heartbeat = Clock::now();
  entry.attached_at = std::chrono::system_clock::now();
  clients_.add(entry);
  ever_attached_ = true;

  ipc::AttachReply reply;
  reply.client_idx = lease->client_idx;
  reply.arena_segment = lease->arena_segment;
  reply.trunk_segment = lease->trunk_segment;
  reply.budget_bytes = ledger_.budget_bytes();
  reply.used_bytes = ledger_.used_bytes();
  reply.arena_slots = setup_.arena_slots;
  reply.cache_slots = ledger_.usable_slots();
  reply.record_bytes = setup_.plan.max_record_bytes;
  reply.daemon_pid = info_.pid;
  reply.instance = info_.instance;
  reply.lease = lease->extra;
  log_->info("client {} attached (pid {}, state {}); budget used {} of {}, cache {} of {} slots", reply.client_idx,
             req->pid, format_bytes(req->state_bytes), format_bytes(reply.used_bytes), format_bytes(reply.budget_bytes),
             reply.cache_slots, reply.arena_slots);
  return ipc::make_ok(ipc::to_json(reply));
}

json Daemon::handle_detach(const json& body) {
  auto req = ipc::detach_request_from_json(body);
  if (!req) return ipc::make_error_reply(req.error());
  const auto it = clients_.clients().find(req->client_idx);
  if (it == clients_.clients().end()) {
    return ipc::make_error_reply(Error{Errc::argument, "client " + std::to_string(req->client_idx) + " is not attached"});
  }
  // A late detach from a reclaimed client must not end the lease that now holds its index.
  if (clients_.occupant(req->client_idx, req->pid, req->generation) == nullptr) {
    const Error stale{Errc::argument, "stale detach ignored: client " + std::to_string(req->client_idx) +
                                          " is pid " + std::to_string(it->second.pid) + " generation " +
                                          std::to_string(it->second.generation) + ", not pid " +
                                          std::to_string(req->pid) + " generation " + std::to_string(req->generation)};
    log_->warn("{}", stale.message);
    return ipc::make_error_reply(stale);
  }
  drop_client(req->client_idx, "detached");
  return ipc::make_ok();
}

json Daemon::handle_heartbeat(const json& body) {
  auto req = ipc::heartbeat_request_from_json(body);
  if (!req) return ipc::make_error_reply(req.error());
  const int idx = req->client_idx;
  const int pid = req->pid;
  if (!clients_.touch(idx, pid, Clock::now())) {
    return ipc::make_error_reply(Error{Errc::ipc, "client " + std::to_string(idx) + " (pid " + std::to_string(pid) +
                                                      ") is not attached (reclaimed?)"});
  }
  return ipc::make_ok();
}

json Daemon::handle_stats() const {
  json plane = plane_->stats();
  json per_plane = json::object();
  if (plane.contains("clients") && plane["clients"].is_array()) {
    for (const auto& c : plane["clients"]) {
      if (c.contains("client_idx")) per_plane[std::to_string(c["client_idx"].get<int>())] = c;
    }
  }
  json clients = json::array();
  const auto now = Clock::now();
  for (const auto& [idx, entry] : clients_.clients()) {
    json c = per_plane.value(std::to_string(idx), json::object());
    c["client_idx"] = idx;
    c["pid"] = entry.pid;
    c["state_bytes"] = entry.state_bytes;
    c["generation"] = entry.generation;
    c["heartbeat_age_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(now - entry.last_heartbeat).count();
    clients.push_back(std::move(c));
  }
  json budget = {{"budget_bytes", ledger_.budget_bytes()}, {"used_bytes", ledger_.used_bytes()},
                 {"trunk_bytes", ledger_.trunk_bytes()},   {"arena_bytes", ledger_.arena_bytes()},
                 {"clients_bytes", ledger_.clients_bytes()}, {"floor_bytes", setup_.plan.floor_bytes},
                 {"arena_slots", setup_.arena_slots}, {"cache_slots", ledger_.usable_slots()},
                 {"floor_slots", ledger_.floor_slots()}};
  return ipc::make_ok(json{{"instance", info_.instance},
                           {"pid", info_.pid},
                           {"model", info_.model},
                           {"policy", policy_},
                           {"draining", draining_},
                           {"budget", budget},
                           {"totals", plane.value("totals", json::object())},
                           {"clients", clients}});
}

Status Daemon::reconfigure(const ipc::ConfigRequest& request) {
  if (request.budget_bytes) {
    if (*request.budget_bytes < setup_.plan.floor_bytes) {
      return make_error(Errc::ram_budget, "budget " + format_bytes(*request.budget_bytes) + " is below the floor " +
                                              format_bytes(setup_.plan.floor_bytes) + " for this model");
    }
    // The ledger check first (it changes nothing on refusal), then the machine's.
    BudgetLedger trial = ledger_;
    WASTE_TRY(trial.set_budget(*request.budget_bytes));
    WASTE_TRY(MachineLedger(ipc::machine_ledger_path())
                  .update_budget(info_.instance, info_.pid, *request.budget_bytes, setup_.ram.cap_bytes));
    ledger_ = std::move(trial);
    base_budget_ = *request.budget_bytes;
    WASTE_TRY(apply_cache_slots());
    info_.budget_bytes = *request.budget_bytes;
    if (!draining_) (void)ipc::write_daemon_info(info_);
    log_->info("budget set to {}", format_bytes(*request.budget_bytes));
  }
  if (request.policy) {
    WASTE_TRY(plane_->set_policy(*request.policy));
    policy_ = *request.policy;
    log_->info("cache policy set to {}", policy_);
  }
  return ok();
}

json Daemon::handle_config(const json& body) {
  auto req = ipc::config_request_from_json(body);
  if (!req) return ipc::make_error_reply(req.error());
  if (auto st = reconfigure(*req); !st) return ipc::make_error_reply(st.error());
  return ipc::make_ok(json{{"policy", policy_}, {"budget_bytes", ledger_.budget_bytes()}});
}

json Daemon::handle_shutdown(const json& body) {
  auto req = ipc::shutdown_request_from_json(body);
  if (!req) return ipc::make_error_reply(req.error());
  begin_drain(std::chrono::milliseconds(req->drain_ms));
  return ipc::make_ok(json{{"clients", clients_.clients().size()}});
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
