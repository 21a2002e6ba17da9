// The waste-ioserver control plane: JSON messages over a ZeroMQ REQ/REP socket.
//
// Every request is {"v": kProtocolVersion, "op": "<op>", ...fields}; every reply is
// {"v": kProtocolVersion, "ok": true, ...fields} or {"v": ..., "ok": false, "code": "<errc>",
// "error": "<message>"}. A daemon refuses a request whose "v" differs (Errc::ipc).
//
//   ping       {}                                  -> {pid, instance, model, budget_bytes, protocol,
//                                                      clients, draining, auto_exit, linger_ms}
//   attach     {pid, state_bytes, start_ticks?}    -> AttachReply (its "lease": Lease); a draining
//                                                     daemon refuses it with code "cancelled"
//                                                     (kDrainingCode)
//   detach     {client_idx, pid, generation}       -> {}; one that does not name the index's
//                                                     current occupant is refused, no effect
//   heartbeat  {client_idx, pid}                   -> {} (informational: never reclaims)
//   stats      {}                                  -> {budget{...}, totals{...}, clients[...]}
//   config     {policy?: "echo"|"reuse"|"lfru"|"lru", budget_bytes?} -> {policy, budget_bytes}
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

// 2: detach names {client_idx, pid, generation}; attach may carry start_ticks.
inline constexpr int kProtocolVersion = 2;

// How often clients heartbeat. Informational only (age in stats): a late heartbeat never
// reclaims a client, only its process's death does.
inline constexpr int kHeartbeatIntervalMs = 250;

// The error code of an attach refused because the daemon is draining (shutting down or its
// linger ran out): discovery then waits for that daemon to go and starts a new one.
inline constexpr Errc kDrainingCode = Errc::cancelled;

struct AttachRequest {
  int pid = 0;
  std::uint64_t state_bytes = 0;   // what the client will hold itself (state + scratch)
  std::uint64_t start_ticks = 0;   // the pid's start time (0: the daemon reads it at attach)
};

struct DetachRequest {
  int client_idx = -1;
  int pid = 0;
  std::uint64_t generation = 0;    // AttachReply::lease.generation
};

// The data plane's side of an attach (AttachReply::lease, written by the daemon from
// IoServer::attach, read by the client into its ipc::ClientLease): every field is required.
struct Lease {
  std::uint64_t generation = 0;    // ClientShm::generation at attach (detach names it)
  int pid = 0;                     // the process the lease was granted to
  std::uint64_t trunk_bytes = 0;
  int daemon_pid = 0;
  std::string ring_segment;        // this lease's rings; empty: derived from the arena's name
  std::string wake_segment;        // the daemon's doorbell; empty: derived from the arena's name
  std::string shm_dir;             // directory of the segment files; empty: /dev/shm
};

struct AttachReply {
  int client_idx = -1;
  std::string arena_segment;       // shm names to map (open_only)
  std::string trunk_segment;
  std::uint64_t budget_bytes = 0;
  std::uint64_t used_bytes = 0;    // after this attach
  std::uint64_t arena_slots = 0;
  std::uint64_t cache_slots = 0;   // slots the cache may use after this attach (<= arena_slots)
  std::uint64_t record_bytes = 0;
  int daemon_pid = 0;
  std::string instance;
  int heartbeat_ms = kHeartbeatIntervalMs;
  Lease lease;                     // data-plane details (everything the DaemonExpertSource needs)
};

struct HeartbeatRequest {
  int client_idx = -1;
  int pid = 0;
};

inline constexpr int kDefaultDrainMs = 2000;
struct ShutdownRequest {
  int drain_ms = kDefaultDrainMs;  // a negative one reads as 0
};

struct ConfigRequest {
  std::optional<std::string> policy;          // "echo" | "reuse" | "lfru" | "lru"
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
nlohmann::json to_json(const Lease& l);
nlohmann::json to_json(const ConfigRequest& r);
nlohmann::json to_json(const DetachRequest& r);
Result<DetachRequest> detach_request_from_json(const nlohmann::json& j);
Result<AttachRequest> attach_request_from_json(const nlohmann::json& j);
// The reply's "lease" must be an object holding every Lease field (lease_from_json).
Result<AttachReply> attach_reply_from_json(const nlohmann::json& j);
// Errc::ipc naming the field: "attach reply lease: \"generation\" is missing",
// "... \"ring_segment\" must be a string, not 5".
Result<Lease> lease_from_json(const nlohmann::json& j);
Result<ConfigRequest> config_request_from_json(const nlohmann::json& j);
Result<HeartbeatRequest> heartbeat_request_from_json(const nlohmann::json& j);
Result<ShutdownRequest> shutdown_request_from_json(const nlohmann::json& j);
// Every integer field above must be a JSON integer within its C++ type's range: a float, a
// string or a number that would wrap is refused with an error naming the field, never narrowed.

// Errc <-> its wire name ("ram_budget", ...).
Errc errc_from_name(std::string_view name) noexcept;

}  // namespace waste::ipc
