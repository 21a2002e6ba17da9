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
  auto failure = parse_reply(R"({"v": 2, "ok": false, "code": "ram_budget", "error": "over budget"})");
  REQUIRE_FALSE(failure);
  CHECK(failure.error().code == Errc::ram_budget);
  CHECK(failure.error().message == "over budget");
}
