#include "shared/ipc/protocol.hpp"

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
  if (it->get<int>() != kProtocolVersion) {
    return make_error(Errc::ipc, std::string(what) + " uses protocol version " + std::to_string(it->get<int>()) +
                                     ", this side speaks " + std::to_string(kProtocolVersion));
  }
  return ok();
}

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
  if (!j.value("ok", false)) {
    const std::string code = j.value("code", std::string("ipc"));
    const std::string message = j.value("error", std::string("request failed"));
    return make_error(errc_from_name(code), message);
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
  try {
    DetachRequest r;
    r.client_idx = j.at("client_idx").get<int>();
    r.pid = j.at("pid").get<int>();
    r.generation = j.at("generation").get<std::uint64_t>();
    return r;
  } catch (const json::exception& e) {
    return make_error(Errc::format, std::string("detach: ") + e.what());
  }
}

json to_json(const AttachReply& r) {
  return json{{"client_idx", r.client_idx},     {"arena_segment", r.arena_segment}, {"trunk_segment", r.trunk_segment},
              {"budget_bytes", r.budget_bytes}, {"used_bytes", r.used_bytes},       {"arena_slots", r.arena_slots},
              {"cache_slots", r.cache_slots},
              {"record_bytes", r.record_bytes}, {"daemon_pid", r.daemon_pid},       {"instance", r.instance},
              {"heartbeat_ms", r.heartbeat_ms}, {"lease", r.lease}};
}

json to_json(const ConfigRequest& r) {
  json j = json::object();
  if (r.policy) j["policy"] = *r.policy;
  if (r.budget_bytes) j["budget_bytes"] = *r.budget_bytes;
  return j;
}

Result<AttachRequest> attach_request_from_json(const json& j) {
  try {
    AttachRequest r;
    r.pid = j.at("pid").get<int>();
    r.state_bytes = j.at("state_bytes").get<std::uint64_t>();
    r.start_ticks = j.value("start_ticks", std::uint64_t{0});
    if (r.pid <= 0) return make_error(Errc::argument, "attach: pid " + std::to_string(r.pid) + " is not a process id");
    return r;
  } catch (const json::exception& e) {
    return make_error(Errc::format, std::string("attach: ") + e.what());
  }
}

Result<AttachReply> attach_reply_from_json(const json& j) {
  try {
    AttachReply r;
    r.client_idx = j.at("client_idx").get<int>();
    r.arena_segment = j.value("arena_segment", std::string());
    r.trunk_segment = j.value("trunk_segment", std::string());
    r.budget_bytes = j.at("budget_bytes").get<std::uint64_t>();
    r.used_bytes = j.at("used_bytes").get<std::uint64_t>();
    r.arena_slots = j.value("arena_slots", std::uint64_t{0});
    r.cache_slots = j.value("cache_slots", r.arena_slots);
    r.record_bytes = j.value("record_bytes", std::uint64_t{0});
    r.daemon_pid = j.at("daemon_pid").get<int>();
    r.instance = j.value("instance", std::string());
    r.heartbeat_ms = j.value("heartbeat_ms", kHeartbeatIntervalMs);
    r.lease = j.value("lease", json::object());
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
    if (j.contains("budget_bytes")) r.budget_bytes = j.at("budget_bytes").get<std::uint64_t>();
    return r;
  } catch (const json::exception& e) {
    return make_error(Errc::format, std::string("config: ") + e.what());
  }
}

}  // namespace waste::ipc
