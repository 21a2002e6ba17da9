#include "shared/ipc/protocol.hpp"

#include <limits>
#include <optional>
#include <utility>

namespace waste::ipc {

using nlohmann::json;

json make_request(std::string_view op, json fields) {
  if (!fields.is_object()) fields = json::object();
  fields["v"] = kProtocolVersion;
  fields["op"] = std::string(op);
  return fields;
}

json make_ok(json fields) {
  if (!fields.is_object()) fields = json::object();
  fields["v"] = kProtocolVersion;
  fields["ok"] = true;
  return fields;
}

json make_error_reply(const Error& error) {
  return json{{"v", kProtocolVersion}, {"ok", false}, {"code", errc_name(error.code)}, {"error", error.message}};
}

Errc errc_from_name(std::string_view name) noexcept {
  for (Errc c : {Errc::io, Errc::format, Errc::ram_budget, Errc::out_of_memory, Errc::argument, Errc::unsupported,
                 Errc::cancelled, Errc::ipc}) {
    if (name == errc_name(c)) return c;
  }
  return Errc::ipc;
}

namespace {

Status check_version(const json& j, std::string_view what) {
  const auto it = j.find("v");
  if (it == j.end() || !it->is_number_integer()) {
    return make_error(Errc::ipc, std::string(what) + " has no protocol version");
  }
  // Compared as the integer it is: 4294967298 is not version 2.
  const bool same = it->is_number_unsigned() ? it->get<std::uint64_t>() == std::uint64_t(kProtocolVersion)
                                             : it->get<std::int64_t>() == kProtocolVersion;
  if (!same) {
    return make_error(Errc::ipc, std::string(what) + " uses protocol version " + it->dump() + ", this side speaks " +
                                     std::to_string(kProtocolVersion));
  }
  return ok();
}

// The integer field `key` as a T: a JSON integer within T's range, or `fallback` when absent (an
// error when there is none). A float, a string or a value that would wrap is refused, never narrowed.
template <class T>
Result<T> integer_field(const json& j, const char* key, std::string_view what, Errc code,
                        std::optional<T> fallback = std::nullopt) {
  const auto it = j.find(key);
  if (it == j.end()) {
    if (fallback) return *fallback;
    return make_error(code, std::string(what) + ": \"" + key + "\" is missing");
  }
  if (it->is_number_unsigned()) {
    const auto v = it->get<std::uint64_t>();
    if (std::in_range<T>(v)) return T(v);
  } else if (it->is_number_integer()) {
    const auto v = it->get<std::int64_t>();
    if (std::in_range<T>(v)) return T(v);
  }
  std::string given = it->dump();
  if (given.size() > 40) given = given.substr(0, 40) + "...";
  return make_error(code, std::string(what) + ": \"" + key + "\" must be an integer in " +
                              std::to_string(std::numeric_limits<T>::min()) + ".." +
                              std::to_string(std::numeric_limits<T>::max()) + ", not " + given);
}

// The string field `key`: present and a JSON string, else an error naming it.
Result<std::string> string_field(const json& j, const char* key, std::string_view what, Errc code) {
  const auto it = j.find(key);
  if (it == j.end()) return make_error(code, std::string(what) + ": \"" + key + "\" is missing");
  if (it->is_string()) return it->get<std::string>();
  std::string given = it->dump();
  if (given.size() > 40) given = given.substr(0, 40) + "...";
  return make_error(code, std::string(what) + ": \"" + key + "\" must be a string, not " + given);
}

// lhs = the field's value, or return its error.
#define WASTE_ASSIGN_OR_RETURN_FIELD(lhs, expr)                  \
  do {                                                          \
    auto field_ = (expr);                                       \
    if (!field_) return std::unexpected(field_.error());        \
    (lhs) = *field_;                                            \
  } while (0)

}  // namespace

Result<Request> parse_request(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(Errc::format, "request is not a JSON object");
  WASTE_TRY(check_version(j, "request"));
  const auto op = j.find("op");
  if (op == j.end() || !op->is_string()) return make_error(Errc::format, "request has no \"op\"");
  Request r{op->get<std::string>(), std::move(j)};
  return r;
}

Result<json> parse_reply(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(Errc::ipc, "reply is not a JSON object");
  WASTE_TRY(check_version(j, "reply"));
  const auto ok = j.find("ok");
  if (ok == j.end() || !ok->is_boolean()) return make_error(Errc::ipc, "reply: \"ok\" is missing or not a boolean");
  if (!ok->get<bool>()) {
    // A reply's code and message are only trusted as strings; anything else falls back rather than throws.
    const auto code = j.find("code");
    const auto error = j.find("error");
    const std::string name = code != j.end() && code->is_string() ? code->get<std::string>() : std::string("ipc");
    std::string message = error != j.end() && error->is_string() ? error->get<std::string>() : std::string("request failed");
    // An error that says nothing still says that it failed (every error carries a message).
    if (message.empty()) message = "request failed (code '" + name + "', no message)";
    return make_error(errc_from_name(name), std::move(message));
  }
  return j;
}

json to_json(const AttachRequest& r) {
  json j{{"pid", r.pid}, {"state_bytes", r.state_bytes}};
  if (r.start_ticks != 0) j["start_ticks"] = r.start_ticks;
  return j;
}

json to_json(const DetachRequest& r) {
  return json{{"client_idx", r.client_idx}, {"pid", r.pid}, {"generation", r.generation}};
}

Result<DetachRequest> detach_request_from_json(const json& j) {
  DetachRequest r;
  WASTE_ASSIGN_OR_RETURN_FIELD(r.client_idx, integer_field<int>(j, "client_idx", "detach", Errc::format));
  WASTE_ASSIGN_OR_RETURN_FIELD(r.pid, integer_field<int>(j, "pid", "detach", Errc::format));
  WASTE_ASSIGN_OR_RETURN_FIELD(r.generation, integer_field<std::uint64_t>(j, "generation", "detach", Errc::format));
  return r;
}

Result<HeartbeatRequest> heartbeat_request_from_json(const json& j) {
  HeartbeatRequest r;
  WASTE_ASSIGN_OR_RETURN_FIELD(r.client_idx, integer_field<int>(j, "client_idx", "heartbeat", Errc::format));
  WASTE_ASSIGN_OR_RETURN_FIELD(r.pid, integer_field<int>(j, "pid", "heartbeat", Errc::format));
  return r;
}

Result<ShutdownRequest> shutdown_request_from_json(const json& j) {
  ShutdownRequest r;
  WASTE_ASSIGN_OR_RETURN_FIELD(r.drain_ms, integer_field<int>(j, "drain_ms", "shutdown", Errc::format, kDefaultDrainMs));
  if (r.drain_ms < 0) r.drain_ms = 0;
  return r;
}

json to_json(const AttachReply& r) {
  return json{{"client_idx", r.client_idx},     {"arena_segment", r.arena_segment}, {"trunk_segment", r.trunk_segment},
              {"budget_bytes", r.budget_bytes}, {"used_bytes", r.used_bytes},       {"arena_slots", r.arena_slots},
              {"cache_slots", r.cache_slots},
              {"record_bytes", r.record_bytes}, {"daemon_pid", r.daemon_pid},       {"instance", r.instance},
              {"heartbeat_ms", r.heartbeat_ms}, {"lease", to_json(r.lease)}};
}

json to_json(const Lease& l) {
  return json{{"generation", l.generation},     {"pid", l.pid},
              {"trunk_bytes", l.trunk_bytes},   {"daemon_pid", l.daemon_pid},
              {"ring_segment", l.ring_segment}, {"wake_segment", l.wake_segment},
              {"shm_dir", l.shm_dir}};
}

Result<Lease> lease_from_json(const json& j) {
  constexpr std::string_view what = "attach reply lease";
  if (!j.is_object()) return make_error(Errc::ipc, std::string(what) + " is not a JSON object");
  Lease l;
  using U = std::uint64_t;
  WASTE_ASSIGN_OR_RETURN_FIELD(l.generation, integer_field<U>(j, "generation", what, Errc::ipc));
  WASTE_ASSIGN_OR_RETURN_FIELD(l.pid, integer_field<int>(j, "pid", what, Errc::ipc));
  WASTE_ASSIGN_OR_RETURN_FIELD(l.trunk_bytes, integer_field<U>(j, "trunk_bytes", what, Errc::ipc));
  WASTE_ASSIGN_OR_RETURN_FIELD(l.daemon_pid, integer_field<int>(j, "daemon_pid", what, Errc::ipc));
  WASTE_ASSIGN_OR_RETURN_FIELD(l.ring_segment, string_field(j, "ring_segment", what, Errc::ipc));
  WASTE_ASSIGN_OR_RETURN_FIELD(l.wake_segment, string_field(j, "wake_segment", what, Errc::ipc));
  WASTE_ASSIGN_OR_RETURN_FIELD(l.shm_dir, string_field(j, "shm_dir", what, Errc::ipc));
  return l;
}

json to_json(const ConfigRequest& r) {
  json j = json::object();
  if (r.policy) j["policy"] = *r.policy;
  if (r.budget_bytes) j["budget_bytes"] = *r.budget_bytes;
  return j;
}

Result<AttachRequest> attach_request_from_json(const json& j) {
  AttachRequest r;
  WASTE_ASSIGN_OR_RETURN_FIELD(r.pid, integer_field<int>(j, "pid", "attach", Errc::format));
  WASTE_ASSIGN_OR_RETURN_FIELD(r.state_bytes, integer_field<std::uint64_t>(j, "state_bytes", "attach", Errc::format));
  WASTE_ASSIGN_OR_RETURN_FIELD(r.start_ticks,
                               integer_field<std::uint64_t>(j, "start_ticks", "attach", Errc::format, std::uint64_t{0}));
  if (r.pid <= 0) return make_error(Errc::argument, "attach: pid " + std::to_string(r.pid) + " is not a process id");
  return r;
}

Result<AttachReply> attach_reply_from_json(const json& j) {
  try {
    AttachReply r;
    constexpr std::string_view what = "attach reply";
    using U = std::uint64_t;
    WASTE_ASSIGN_OR_RETURN_FIELD(r.client_idx, integer_field<int>(j, "client_idx", what, Errc::ipc));
    r.arena_segment = j.value("arena_segment", std::string());
    r.trunk_segment = j.value("trunk_segment", std::string());
    WASTE_ASSIGN_OR_RETURN_FIELD(r.budget_bytes, integer_field<U>(j, "budget_bytes", what, Errc::ipc));
    WASTE_ASSIGN_OR_RETURN_FIELD(r.used_bytes, integer_field<U>(j, "used_bytes", what, Errc::ipc));
    WASTE_ASSIGN_OR_RETURN_FIELD(r.arena_slots, integer_field<U>(j, "arena_slots", what, Errc::ipc, U{0}));
    WASTE_ASSIGN_OR_RETURN_FIELD(r.cache_slots, integer_field<U>(j, "cache_slots", what, Errc::ipc, r.arena_slots));
    WASTE_ASSIGN_OR_RETURN_FIELD(r.record_bytes, integer_field<U>(j, "record_bytes", what, Errc::ipc, U{0}));
    WASTE_ASSIGN_OR_RETURN_FIELD(r.daemon_pid, integer_field<int>(j, "daemon_pid", what, Errc::ipc));
    r.instance = j.value("instance", std::string());
    WASTE_ASSIGN_OR_RETURN_FIELD(r.heartbeat_ms,
                                 integer_field<int>(j, "heartbeat_ms", what, Errc::ipc, kHeartbeatIntervalMs));
    const auto lease = j.find("lease");
    if (lease == j.end()) return make_error(Errc::ipc, std::string(what) + ": \"lease\" is missing");
    WASTE_ASSIGN_OR_RETURN_FIELD(r.lease, lease_from_json(*lease));
    return r;
  } catch (const json::exception& e) {
    return make_error(Errc::ipc, std::string("attach reply: ") + e.what());
  }
}

Result<ConfigRequest> config_request_from_json(const json& j) {
  try {
    ConfigRequest r;
    if (j.contains("policy")) {
      r.policy = j.at("policy").get<std::string>();
      if (*r.policy != "echo" && *r.policy != "reuse" && *r.policy != "lfru" && *r.policy != "lru") {
        return make_error(Errc::argument, "config: policy '" + *r.policy + "' is not echo, reuse, lfru or lru");
      }
    }
    if (j.contains("budget_bytes")) {
      auto budget = integer_field<std::uint64_t>(j, "budget_bytes", "config", Errc::format);
      if (!budget) return std::unexpected(budget.error());
      r.budget_bytes = *budget;
    }
    return r;
  } catch (const json::exception& e) {
    return make_error(Errc::format, std::string("config: ") + e.what());
  }
}

}  // namespace waste::ipc
