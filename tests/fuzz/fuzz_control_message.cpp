// libFuzzer: one control-socket message as waste-ioserver receives it from a client (or a client
// from the daemon) -> ipc::parse_request, then the field reader of its op as Daemon::handle
// dispatches it (attach, detach, heartbeat, config, shutdown), and the same text as a reply
// (ipc::parse_reply, attach_reply_from_json with its lease) and as a lease by itself
// (lease_from_json). A refusal carries a message; an acceptance holds
// exactly the numbers the message held: a field read as an int or a uint64 was a JSON integer in
// that type's range (never a float, never wrapped), and the version is exactly kProtocolVersion.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "shared/ipc/protocol.hpp"

#define WASTE_FUZZ_CHECK(cond)       \
  do {                               \
    if (!(cond)) __builtin_trap();   \
  } while (0)

namespace {

using nlohmann::json;
using namespace waste::ipc;

// `j[key]` is a JSON integer equal to `value` (so nothing was rounded, wrapped or invented).
template <class T>
bool same_integer(const json& j, const char* key, T value) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return false;
  if (it->is_number_unsigned()) return value >= 0 && it->get<std::uint64_t>() == std::uint64_t(value);
  return value <= T(INT64_MAX) && it->get<std::int64_t>() == std::int64_t(value);
}

// An accepted lease holds exactly the JSON's fields, and what to_json writes for it reads back the same.
void check_lease(const json& j, const Lease& l) {
  WASTE_FUZZ_CHECK(same_integer(j, "generation", l.generation) && same_integer(j, "pid", l.pid) &&
                   same_integer(j, "trunk_bytes", l.trunk_bytes) && same_integer(j, "daemon_pid", l.daemon_pid));
  WASTE_FUZZ_CHECK(j.at("ring_segment") == l.ring_segment && j.at("wake_segment") == l.wake_segment &&
                   j.at("shm_dir") == l.shm_dir);
  auto again = lease_from_json(to_json(l));
  WASTE_FUZZ_CHECK(again && to_json(*again) == to_json(l));
}

void check_request(const json& body, const std::string& op) {
  if (op == "attach") {
    auto r = attach_request_from_json(body);
    if (!r) {
      WASTE_FUZZ_CHECK(!r.error().message.empty());
      return;
    }
    WASTE_FUZZ_CHECK(r->pid > 0 && same_integer(body, "pid", r->pid));
    WASTE_FUZZ_CHECK(same_integer(body, "state_bytes", r->state_bytes));
    WASTE_FUZZ_CHECK(body.contains("start_ticks") ? same_integer(body, "start_ticks", r->start_ticks)
                                                  : r->start_ticks == 0);
    // What the client's encoder writes for it reads back the same.
    auto again = attach_request_from_json(to_json(*r));
    WASTE_FUZZ_CHECK(again && again->pid == r->pid && again->state_bytes == r->state_bytes &&
                     again->start_ticks == r->start_ticks);
  } else if (op == "detach") {
    auto r = detach_request_from_json(body);
    if (!r) {
      WASTE_FUZZ_CHECK(!r.error().message.empty());
      return;
    }
    WASTE_FUZZ_CHECK(same_integer(body, "client_idx", r->client_idx) && same_integer(body, "pid", r->pid) &&
                     same_integer(body, "generation", r->generation));
  } else if (op == "heartbeat") {
    auto r = heartbeat_request_from_json(body);
    if (!r) {
      WASTE_FUZZ_CHECK(!r.error().message.empty());
      return;
    }
    WASTE_FUZZ_CHECK(same_integer(body, "client_idx", r->client_idx) && same_integer(body, "pid", r->pid));
  } else if (op == "shutdown") {
    auto r = shutdown_request_from_json(body);
    if (!r) {
      WASTE_FUZZ_CHECK(!r.error().message.empty());
      return;
    }
    WASTE_FUZZ_CHECK(r->drain_ms >= 0);
    WASTE_FUZZ_CHECK(body.contains("drain_ms") ? r->drain_ms == 0 || same_integer(body, "drain_ms", r->drain_ms)
                                               : r->drain_ms == kDefaultDrainMs);
  } else if (op == "config") {
    auto r = config_request_from_json(body);
    if (!r) {
      WASTE_FUZZ_CHECK(!r.error().message.empty());
      return;
    }
    if (r->policy) {
      WASTE_FUZZ_CHECK(*r->policy == "echo" || *r->policy == "reuse" || *r->policy == "lfru" || *r->policy == "lru");
    }
    WASTE_FUZZ_CHECK(r->budget_bytes ? same_integer(body, "budget_bytes", *r->budget_bytes)
                                     : !body.contains("budget_bytes"));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto request = parse_request(text);
  if (!request) {
    WASTE_FUZZ_CHECK(!request.error().message.empty());
  } else {
    WASTE_FUZZ_CHECK(request->body.is_object() && same_integer(request->body, "v", kProtocolVersion));
    WASTE_FUZZ_CHECK(request->body.at("op").get<std::string>() == request->op);
    check_request(request->body, request->op);
  }

  if (const json whole = json::parse(text, nullptr, false); !whole.is_discarded()) {
    auto lease = lease_from_json(whole);
    if (!lease) {
      WASTE_FUZZ_CHECK(!lease.error().message.empty());
    } else {
      check_lease(whole, *lease);
    }
  }

  auto reply = parse_reply(text);
  if (!reply) {
    WASTE_FUZZ_CHECK(!reply.error().message.empty());
    return 0;
  }
  WASTE_FUZZ_CHECK(reply->is_object() && same_integer(*reply, "v", kProtocolVersion));
  auto attach = attach_reply_from_json(*reply);
  if (!attach) {
    WASTE_FUZZ_CHECK(!attach.error().message.empty());
    return 0;
  }
  WASTE_FUZZ_CHECK(same_integer(*reply, "client_idx", attach->client_idx) &&
                   same_integer(*reply, "budget_bytes", attach->budget_bytes) &&
                   same_integer(*reply, "used_bytes", attach->used_bytes) &&
                   same_integer(*reply, "daemon_pid", attach->daemon_pid));
  check_lease(reply->at("lease"), attach->lease);
  return 0;
}
