// The control protocol: one JSON request on the control socket, one JSON reply (shared/ipc/
// protocol.hpp has the messages). The Daemon's request handlers: ping, attach (admission against
// the budget ledger, the lease), detach, heartbeat, stats, config (reconfigure), shutdown.
// An exception fails one request, never the daemon.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "ioserver/daemon/daemon.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/memory/machine_ledger.hpp"

namespace waste::ioserver {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

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
  entry.generation = lease->lease.generation;
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
  reply.lease = lease->lease;
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
                           {"engram", plane.value("engram", json::object())},
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

}  // namespace waste::ioserver
