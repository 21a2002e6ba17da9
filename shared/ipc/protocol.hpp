// The waste-ioserver control plane: JSON messages over a ZeroMQ REQ/REP socket.
//
// Every request is {"v": kProtocolVersion, "op": "<op>", ...fields}; every reply is
// {"v": kProtocolVersion, "ok": true, ...fields} or {"v": ..., "ok": false, "code": "<errc>",
// "error": "<message>"}. A daemon refuses a request whose "v" differs (Errc::ipc).
//
//   ping       {}                                  -> {pid, instance, model, budget_bytes, protocol}
//   attach     {pid, state_bytes}                  -> AttachReply
//   detach     {client_idx}                        -> {}
//   heartbeat  {client_idx, pid}                   -> {}
//   stats      {}                                  -> {budget{...}, totals{...}, clients[...]}
//   config     {policy?: "lfru"|"lru", budget_bytes?} -> {policy, budget_bytes}
//   shutdown   {drain_ms?}                         -> {} (then drains, removes shm and socket)
//
// Bump kProtocolVersion on any change a peer of the previous version would misread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "shared/result.hpp"

namespace waste::ipc {

inline constexpr int kProtocolVersion = 1;

// How often clients heartbeat, and how long the daemon waits before it reclaims a silent one.
inline constexpr int kHeartbeatIntervalMs = 250;
inline constexpr int kHeartbeatTimeoutMs = 1500;

struct AttachRequest {
  int pid = 0;
  std::uint64_t state_bytes = 0;   // what the client will hold itself (state + scratch)
};

struct AttachReply {
  int client_idx = -1;
  std::string arena_segment;       // shm names to map (open_only)
  std::string trunk_segment;
  std::uint64_t budget_bytes = 0;
  std::uint64_t used_bytes = 0;    // after this attach
  std::uint64_t arena_slots = 0;
  std::uint64_t record_bytes = 0;
  int daemon_pid = 0;
  std::string instance;
  int heartbeat_ms = kHeartbeatIntervalMs;
  nlohmann::json lease;            // data-plane details (everything the DaemonExpertSource needs)
};

struct ConfigRequest {
  std::optional<std::string> policy;          // "lfru" | "lru"
  std::optional<std::uint64_t> budget_bytes;
};

nlohmann::json make_request(std::string_view op, nlohmann::json fields = nlohmann::json::object());
nlohmann::json make_ok(nlohmann::json fields = nlohmann::json::object());
nlohmann::json make_error_reply(const Error& error);

// A request as received: version checked, op extracted. Errors: Errc::ipc / Errc::format.
struct Request {
  std::string op;
  nlohmann::json body;
};
Result<Request> parse_request(std::string_view text);
// A reply: version checked; an error reply becomes the Error it carries.
Result<nlohmann::json> parse_reply(std::string_view text);

nlohmann::json to_json(const AttachRequest& r);
nlohmann::json to_json(const AttachReply& r);
nlohmann::json to_json(const ConfigRequest& r);
Result<AttachRequest> attach_request_from_json(const nlohmann::json& j);
Result<AttachReply> attach_reply_from_json(const nlohmann::json& j);
Result<ConfigRequest> config_request_from_json(const nlohmann::json& j);

// Errc <-> its wire name ("ram_budget", ...).
Errc errc_from_name(std::string_view name) noexcept;

}  // namespace waste::ipc
