// The control protocol's field readers (shared/ipc/protocol): what the daemon takes from a
// client's message and a client from the daemon's reply. An integer field is a JSON integer in
// its C++ type's range; anything else is refused with a message naming the field and the
// range, never narrowed (found while writing tests/fuzz/fuzz_control_message.cpp).
#include <catch2/catch.hpp>

#include "shared/ipc/protocol.hpp"

using namespace waste;
using namespace waste::ipc;
using nlohmann::json;

TEST_CASE("control protocol: a version that wraps to 2 in an int is not version 2", "[shared][ipc][protocol]") {
  auto wrapped = parse_request(R"({"v": 4294967298, "op": "ping"})");
  REQUIRE_FALSE(wrapped);
  CHECK(wrapped.error().code == Errc::ipc);
  CHECK(wrapped.error().message == "request uses protocol version 4294967298, this side speaks 2");
  auto reply = parse_reply(R"({"v": -4294967294, "ok": true})");
  REQUIRE_FALSE(reply);
  CHECK(reply.error().message == "reply uses protocol version -4294967294, this side speaks 2");
  auto good = parse_request(R"({"v": 2, "op": "ping"})");
  REQUIRE(good);
  CHECK(good->op == "ping");
}

TEST_CASE("control protocol: integer fields out of range, negative or fractional are refused by name",
          "[shared][ipc][protocol]") {
  auto wrapped_pid = attach_request_from_json(json::parse(R"({"pid": 4294967297, "state_bytes": 1})"));
  REQUIRE_FALSE(wrapped_pid);
  CHECK(wrapped_pid.error().code == Errc::format);
  CHECK(wrapped_pid.error().message ==
        "attach: \"pid\" must be an integer in -2147483648..2147483647, not 4294967297");
  auto negative_bytes = attach_request_from_json(json::parse(R"({"pid": 5, "state_bytes": -1})"));
  REQUIRE_FALSE(negative_bytes);
  CHECK(negative_bytes.error().message ==
        "attach: \"state_bytes\" must be an integer in 0..18446744073709551615, not -1");
  auto huge_float = attach_request_from_json(json::parse(R"({"pid": 5, "state_bytes": 1e300})"));
  REQUIRE_FALSE(huge_float);
  CHECK(huge_float.error().message ==
        "attach: \"state_bytes\" must be an integer in 0..18446744073709551615, not 1e+300");
  auto fractional = detach_request_from_json(json::parse(R"({"client_idx": 0, "pid": 5, "generation": 1.5})"));
  REQUIRE_FALSE(fractional);
  CHECK(fractional.error().message == "detach: \"generation\" must be an integer in 0..18446744073709551615, not 1.5");
  auto missing = detach_request_from_json(json::parse(R"({"client_idx": 0, "generation": 1})"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message == "detach: \"pid\" is missing");
  auto heartbeat = heartbeat_request_from_json(json::parse(R"({"client_idx": 1e10, "pid": 1})"));
  REQUIRE_FALSE(heartbeat);
  CHECK(heartbeat.error().message ==
        "heartbeat: \"client_idx\" must be an integer in -2147483648..2147483647, not 10000000000.0");
  auto budget = config_request_from_json(json::parse(R"({"budget_bytes": -1})"));
  REQUIRE_FALSE(budget);
  CHECK(budget.error().message == "config: \"budget_bytes\" must be an integer in 0..18446744073709551615, not -1");
  auto shutdown = shutdown_request_from_json(json::parse(R"({"drain_ms": "soon"})"));
  REQUIRE_FALSE(shutdown);
  CHECK(shutdown.error().message == "shutdown: \"drain_ms\" must be an integer in -2147483648..2147483647, not \"soon\"");
  auto reply = attach_reply_from_json(json::parse(R"({"client_idx": 0, "budget_bytes": 1, "used_bytes": 1,
                                                      "daemon_pid": 9, "arena_slots": 2.5})"));
  REQUIRE_FALSE(reply);
  CHECK(reply.error().code == Errc::ipc);
  CHECK(reply.error().message == "attach reply: \"arena_slots\" must be an integer in 0..18446744073709551615, not 2.5");
}

TEST_CASE("control protocol: what the encoders write reads back exactly", "[shared][ipc][protocol]") {
  auto attach = attach_request_from_json(to_json(AttachRequest{4242, 3u << 20, 987654}));
  REQUIRE(attach);
  CHECK(attach->pid == 4242);
  CHECK(attach->state_bytes == 3u << 20);
  CHECK(attach->start_ticks == 987654);
  auto detach = detach_request_from_json(to_json(DetachRequest{1, 4242, ~std::uint64_t{0}}));
  REQUIRE(detach);
  CHECK(detach->generation == ~std::uint64_t{0});
  auto heartbeat = heartbeat_request_from_json(json{{"client_idx", 3}, {"pid", 4242}});
  REQUIRE(heartbeat);
  CHECK(heartbeat->client_idx == 3);
  CHECK(heartbeat->pid == 4242);
  auto by_default = shutdown_request_from_json(json::object());
  REQUIRE(by_default);
  CHECK(by_default->drain_ms == kDefaultDrainMs);
  auto negative = shutdown_request_from_json(json{{"drain_ms", -5}});
  REQUIRE(negative);
  CHECK(negative->drain_ms == 0);
  AttachReply r;
  r.client_idx = 2;
  r.budget_bytes = 8ull << 30;
  r.used_bytes = 1ull << 30;
  r.arena_slots = 64;
  r.cache_slots = 60;
  r.daemon_pid = 77;
  auto reply = attach_reply_from_json(make_ok(to_json(r)));
  REQUIRE(reply);
  CHECK(reply->budget_bytes == 8ull << 30);
  CHECK(reply->cache_slots == 60);
  CHECK(reply->heartbeat_ms == kHeartbeatIntervalMs);
}

TEST_CASE("control protocol: a reply whose ok, code or error has the wrong type is refused, not thrown",
          "[shared][ipc]") {
  // Found by fuzz_control_message: {"ok": 1824} made nlohmann's value<bool>() throw out of parse_reply.
  auto numeric_ok = parse_reply(R"({"v": 2, "ok": 1824, "client_idx": 1})");
  REQUIRE_FALSE(numeric_ok);
  CHECK(numeric_ok.error().code == Errc::ipc);
  CHECK(numeric_ok.error().message == "reply: \"ok\" is missing or not a boolean");
  auto missing_ok = parse_reply(R"({"v": 2})");
  REQUIRE_FALSE(missing_ok);
  CHECK(missing_ok.error().message == "reply: \"ok\" is missing or not a boolean");
  auto odd_failure = parse_reply(R"({"v": 2, "ok": false, "code": 7, "error": ["x"]})");
  REQUIRE_FALSE(odd_failure);
  CHECK(odd_failure.error().code == Errc::ipc);
  CHECK(odd_failure.error().message == "request failed");
  // Found by fuzz_control_message (session 21): an empty "error" string became an error without a message.
  auto empty_error = parse_reply(R"({"code":"cancld","error":"","ok":false,"v":2})");
  REQUIRE_FALSE(empty_error);
  CHECK(empty_error.error().code == Errc::ipc);
  CHECK(empty_error.error().message == "request failed (code 'cancld', no message)");
  auto failure = parse_reply(R"({"v": 2, "ok": false, "code": "ram_budget", "error": "over budget"})");
  REQUIRE_FALSE(failure);
  CHECK(failure.error().code == Errc::ram_budget);
  CHECK(failure.error().message == "over budget");
}

namespace {

// What IoServerPlane writes for a lease (ioserver/control/io_server_plane.cpp), every field set.
json full_lease() {
  return json{{"generation", 3},         {"pid", 4242},
              {"trunk_bytes", 1 << 20},  {"daemon_pid", 77},
              {"ring_segment", "waste-1000-x-ring-1-3"}, {"wake_segment", "waste-1000-x-wake"},
              {"shm_dir", "/dev/shm"}};
}

// The message lease_from_json refuses a full lease with `key` set to `value` by ("" if accepted).
std::string lease_refusal(const char* key, json value) {
  json lease = full_lease();
  lease[key] = std::move(value);
  auto read = lease_from_json(lease);
  if (read) return "";
  CHECK(read.error().code == Errc::ipc);
  return read.error().message;
}

json reply_with_lease(json lease) {
  return json{{"client_idx", 1}, {"budget_bytes", 8}, {"used_bytes", 4}, {"daemon_pid", 77},
              {"lease", std::move(lease)}};
}

}  // namespace

TEST_CASE("control protocol: every lease field is required and typed, named in the refusal",
          "[shared][ipc][protocol]") {
  for (const char* key :
       {"generation", "pid", "trunk_bytes", "daemon_pid", "ring_segment", "wake_segment", "shm_dir"}) {
    json lease = full_lease();
    lease.erase(key);
    auto missing = lease_from_json(lease);
    REQUIRE_FALSE(missing);
    CHECK(missing.error().code == Errc::ipc);
    CHECK(missing.error().message == std::string("attach reply lease: \"") + key + "\" is missing");
    // The same refusal through the attach reply the client reads.
    auto reply = attach_reply_from_json(reply_with_lease(lease));
    REQUIRE_FALSE(reply);
    CHECK(reply.error().message == std::string("attach reply lease: \"") + key + "\" is missing");
  }
  CHECK(lease_refusal("generation", "3") ==
        "attach reply lease: \"generation\" must be an integer in 0..18446744073709551615, not \"3\"");
  CHECK(lease_refusal("pid", 4294967297ULL) ==
        "attach reply lease: \"pid\" must be an integer in -2147483648..2147483647, not 4294967297");
  CHECK(lease_refusal("trunk_bytes", -1) ==
        "attach reply lease: \"trunk_bytes\" must be an integer in 0..18446744073709551615, not -1");
  CHECK(lease_refusal("daemon_pid", 7.5) ==
        "attach reply lease: \"daemon_pid\" must be an integer in -2147483648..2147483647, not 7.5");
  CHECK(lease_refusal("ring_segment", 5) == "attach reply lease: \"ring_segment\" must be a string, not 5");
  CHECK(lease_refusal("shm_dir", nullptr) == "attach reply lease: \"shm_dir\" must be a string, not null");
  auto not_object = attach_reply_from_json(reply_with_lease(json::array({1, 2})));
  REQUIRE_FALSE(not_object);
  CHECK(not_object.error().code == Errc::ipc);
  CHECK(not_object.error().message == "attach reply lease is not a JSON object");
  json no_lease = reply_with_lease(full_lease());
  no_lease.erase("lease");
  auto absent = attach_reply_from_json(no_lease);
  REQUIRE_FALSE(absent);
  CHECK(absent.error().code == Errc::ipc);
  CHECK(absent.error().message == "attach reply: \"lease\" is missing");
}

TEST_CASE("control protocol: a lease reads back exactly what was written, both ways", "[shared][ipc][protocol]") {
  Lease l;
  l.generation = ~std::uint64_t{0};
  l.pid = 2147483647;
  l.trunk_bytes = (1ULL << 40) + 3;
  l.daemon_pid = 1;
  l.ring_segment = "waste-1000-x-ring-15-18446744073709551615";
  l.wake_segment = "waste-1000-x-wake";
  l.shm_dir = "";
  const json written = to_json(l);
  CHECK(written == json::parse(R"({"generation": 18446744073709551615, "pid": 2147483647,
                                   "trunk_bytes": 1099511627779, "daemon_pid": 1,
                                   "ring_segment": "waste-1000-x-ring-15-18446744073709551615",
                                   "wake_segment": "waste-1000-x-wake", "shm_dir": ""})"));
  auto back = lease_from_json(written);
  REQUIRE(back);
  CHECK(back->generation == ~std::uint64_t{0});
  CHECK(back->pid == 2147483647);
  CHECK(back->trunk_bytes == (1ULL << 40) + 3);
  CHECK(back->daemon_pid == 1);
  CHECK(back->ring_segment == l.ring_segment);
  CHECK(back->wake_segment == l.wake_segment);
  CHECK(back->shm_dir.empty());
  // Through the attach reply, as the daemon writes it and the client reads it.
  AttachReply r;
  r.client_idx = 15;
  r.daemon_pid = 1;
  r.lease = l;
  auto reply = attach_reply_from_json(make_ok(to_json(r)));
  REQUIRE(reply);
  CHECK(to_json(reply->lease) == written);
  CHECK(to_json(*reply) == to_json(r));
  // A JSON lease read and written again is the same JSON.
  auto read = lease_from_json(full_lease());
  REQUIRE(read);
  CHECK(to_json(*read) == full_lease());
}
