// The HTTP transport's limits, checked on the parser configuration the server uses
// (check_request) and on an HttpServer in this process over loopback sockets: header bytes and
// field count (431), bodies over the cap in either transfer encoding (413, before the body is
// read), malformed chunk sizes (400), HTTP/1.0 and keep-alive, the connection cap (503), and the
// API key's check and sources.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "cli/serve/api_key.hpp"
#include "cli/serve/http/request_parser.hpp"
#include "cli/serve/http/transport.hpp"
#include "cli/serve/http_server.hpp"
#include "tests/serve/http_client.hpp"

namespace waste::serve {
namespace {

using http::check_request;
using http::HttpLimits;

std::string chunked_post(const std::string& body, std::size_t piece) {
  std::string out = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (std::size_t i = 0; i < body.size(); i += piece) {
    const std::string part = body.substr(i, piece);
    char size[20];
    std::snprintf(size, sizeof size, "%zx\r\n", part.size());
    out += size + part + "\r\n";
  }
  return out + "0\r\n\r\n";
}

TEST_CASE("check_request: a request within the limits", "[serve][http]") {
  const auto r = check_request("POST /v1/completions?x=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                               "Content-Length: 2\r\n\r\n{}",
                               HttpLimits{});
  REQUIRE(r.complete);
  CHECK(r.request.method == "POST");
  CHECK(r.request.path == "/v1/completions");
  CHECK(r.request.authorization == "Bearer k");
  CHECK(r.request.body == "{}");
  CHECK(r.request.version == 11);
  const auto chunked = check_request(chunked_post("hello world", 4), HttpLimits{});
  REQUIRE(chunked.complete);
  CHECK(chunked.request.body == "hello world");
  const auto partial = check_request("GET /health HTTP/1.1\r\nHost:", HttpLimits{});
  CHECK_FALSE(partial.complete);
  CHECK_FALSE(partial.refused);
}

TEST_CASE("check_request: header bytes and field count over the limits get 431", "[serve][http]") {
  HttpLimits limits;
  limits.header_bytes = 16 << 10;
  const auto longline = check_request("GET /health HTTP/1.1\r\nX: " + std::string(1 << 20, 'a'), limits);
  REQUIRE(longline.refused);
  CHECK(longline.refusal.status == 431);
  CHECK(longline.refusal.message == "request header over the size limit (16 KiB, --max-header-kib)");
  std::string many = "GET /health HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) many += "X-" + std::to_string(i) + ": 1\r\n";
  const auto fields = check_request(many + "\r\n", limits);
  REQUIRE(fields.refused);
  CHECK(fields.refusal.status == 431);
  CHECK(fields.refusal.message == "request has 101 header fields; the limit is 100 (--max-headers)");
}

TEST_CASE("check_request: bodies over the cap get 413 in either transfer encoding", "[serve][http]") {
  HttpLimits limits;
  limits.body_bytes = 1024;
  // Content-Length over the cap: refused from the head alone.
  const auto declared = check_request("POST /v1/completions HTTP/1.1\r\nContent-Length: 1025\r\n\r\n", limits);
  REQUIRE(declared.refused);
  CHECK(declared.refusal.status == 413);
  CHECK(declared.refusal.message == "request body over the size limit (1 KiB, --max-body-mib)");
  const auto exact = check_request("POST /v1/completions HTTP/1.1\r\nContent-Length: 1024\r\n\r\n" + std::string(1024, 'x'), limits);
  CHECK(exact.complete);
  // Chunked: the decoded size counts, whatever the chunking; a single huge chunk size too.
  for (std::size_t piece : {1, 100, 1000, 4096}) {
    const auto r = check_request(chunked_post(std::string(1025, 'y'), piece), limits);
    INFO(piece);
    REQUIRE(r.refused);
    CHECK(r.refusal.status == 413);
  }
  const auto huge = check_request("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4000000\r\nab", limits);
  REQUIRE(huge.refused);
  CHECK(huge.refusal.status == 413);
}

TEST_CASE("check_request: malformed chunk sizes and heads get 400", "[serve][http]") {
  for (const char* size : {"-1", "ffffffffffffffffffff", "zz", "+5"}) {
    const auto r = check_request(std::string("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") + size +
                                     "\r\nabcde\r\n0\r\n\r\n",
                                 HttpLimits{});
    INFO(size);
    REQUIRE(r.refused);
    // A size past 64 bits is a bad chunk or over the cap: never a wrapped-around small size.
    CHECK((r.refusal.status == 400 || r.refusal.status == 413));
  }
  for (const char* head : {"GET\r\n\r\n", "GET /health HTTP/9.9\r\n\r\n", "G@T /health HTTP/1.1\r\n\r\n",
                           "POST / HTTP/1.1\r\nContent-Length: -4\r\n\r\n",
                           "POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n"}) {
    INFO(head);
    const auto r = check_request(head, HttpLimits{});
    REQUIRE(r.refused);
    CHECK(r.refusal.status == 400);
  }
}

TEST_CASE("check_request: a request split at every byte parses as it does whole (split last chunk)",
          "[serve][http]") {
  // Hazard (found by fuzz_http_request): Boost 1.74's parser asserted n >= 5 when the last chunk
  // came without its closing CRLF and then one more byte arrived; with assertions on, a client
  // could abort the server by splitting its request so.
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "3\r\nabc\r\n0\r\n\r\n";
  for (std::size_t segment = 1; segment <= request.size(); ++segment) {
    INFO(segment);
    const auto r = check_request(request, HttpLimits{}, segment);
    REQUIRE(r.complete);
    CHECK(r.request.body == "abc");
    CHECK(r.consumed == request.size());
  }
}

TEST_CASE("API key: constant-time check of the Authorization field", "[serve][http]") {
  CHECK(authorization_matches("Bearer sk-1", "sk-1"));
  CHECK_FALSE(authorization_matches("Bearer sk-2", "sk-1"));
  CHECK_FALSE(authorization_matches("Bearer sk-1x", "sk-1"));
  CHECK_FALSE(authorization_matches("Bearer sk-", "sk-1"));
  CHECK_FALSE(authorization_matches("bearer sk-1", "sk-1"));
  CHECK_FALSE(authorization_matches("", "sk-1"));
  CHECK_FALSE(authorization_matches("Bearer ", ""));
}

TEST_CASE("API key: from a file or WASTE_API_KEY, the command line warns", "[serve][http]") {
  const auto dir = std::filesystem::temp_directory_path() / ("waste-key-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto file = (dir / "key").string();
  std::ofstream(file) << "  sk-file \n second line\n";
  std::string warning;
  auto from_file = choose_api_key(file, "", warning);
  REQUIRE(from_file);
  CHECK(*from_file == "sk-file");
  CHECK(warning.empty());
  std::ofstream(file) << "\n";
  auto empty = read_api_key_file(file);
  REQUIRE_FALSE(empty);
  CHECK(empty.error().message == "--api-key-file " + file + ": the file holds no key");
  CHECK_FALSE(read_api_key_file((dir / "none").string()));
  auto both = choose_api_key(file, "sk-cli", warning);
  REQUIRE_FALSE(both);
  CHECK(both.error().message == "--api-key and --api-key-file: give the key one way");
  auto cli = choose_api_key("", "sk-cli", warning);
  REQUIRE(cli);
  CHECK(*cli == "sk-cli");
  CHECK(warning.find("/proc/PID/cmdline") != std::string::npos);
  ::setenv(kApiKeyEnv, "sk-env", 1);
  auto env = choose_api_key("", "", warning);
  REQUIRE(env);
  CHECK(*env == "sk-env");
  CHECK(std::getenv(kApiKeyEnv) == nullptr);  // not inherited by a daemon started after
  std::filesystem::remove_all(dir);
}

// An HttpServer still loading (no model): the transport and the non-generation routes.
struct Loading {
  Metrics metrics;
  std::optional<HttpServer> server;
  explicit Loading(HttpLimits limits = {}) {
    ServeConfig config;
    config.port = 0;
    config.model_id = "m";
    config.limits = limits;
    server.emplace(config, metrics);
    REQUIRE(server->start());
  }
  [[nodiscard]] int port() const { return server->port(); }
};

std::string exchange(int port, const std::string& bytes) {
  http_test::RawSocket s(port);
  REQUIRE(s.ok());
  REQUIRE(s.send_all(bytes));
  return s.read_all(std::chrono::seconds(10));
}

TEST_CASE("HttpServer: transport refusals are OpenAI errors, HTTP/1.0 and keep-alive", "[serve][http]") {
  HttpLimits limits;
  limits.body_bytes = 1024;
  Loading l(limits);
  const auto too_big = http_test::parse_answer(exchange(l.port(), chunked_post(std::string(5000, 'z'), 1000)));
  CHECK(too_big.status == 413);
  CHECK(too_big.body == R"J({"error":{"code":"payload_too_large","message":"request body over the size limit (1 KiB, )J"
                        R"J(--max-body-mib)","param":null,"type":"invalid_request_error"}})J");
  CHECK(too_big.head.find("Connection: close") != std::string::npos);
  const auto bad = http_test::parse_answer(exchange(l.port(), "POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"));
  CHECK(bad.status == 400);
  CHECK(bad.body.find(R"("type":"invalid_request_error")") != std::string::npos);
  const auto old = http_test::parse_answer(exchange(l.port(), "GET /health HTTP/1.0\r\n\r\n"));
  CHECK(old.status == 503);
  CHECK(old.body.find("loading model") != std::string::npos);
  CHECK(old.head.find("Connection: close") != std::string::npos);
  // Two requests on one connection, the second asking to close.
  const std::string two = exchange(l.port(), "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                                             "GET /v1/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(two.find("HTTP/1.1 200 OK") == 0);
  CHECK(two.find("Connection: keep-alive") != std::string::npos);
  CHECK(two.find("HTTP/1.1 404 Not Found") != std::string::npos);
  CHECK(two.find("no route GET /v1/nothing") != std::string::npos);
}

TEST_CASE("HttpServer: a chunked request whose last chunk arrives byte by byte is answered", "[serve][http]") {
  Loading l;
  http_test::RawSocket s(l.port());
  REQUIRE(s.ok());
  REQUIRE(s.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"));
  for (const char* piece : {"0\r\n", "\r", "\n"}) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // separate reads on the server
    REQUIRE(s.send_all(piece));
  }
  const auto answer = http_test::parse_answer(s.read_all(std::chrono::seconds(10)));
  CHECK(answer.status == 503);  // the route's answer (still loading): the server read it whole
  CHECK(answer.body.find("loading model") != std::string::npos);
}

TEST_CASE("HttpServer: past --max-connections a new connection gets 503 and is closed", "[serve][http]") {
  HttpLimits limits;
  limits.max_connections = 4;
  Loading l(limits);
  std::vector<std::unique_ptr<http_test::RawSocket>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<http_test::RawSocket>(l.port()));
    REQUIRE(held.back()->send_all("G"));  // a request begun, never finished
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto refused = http_test::parse_answer(exchange(l.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  CHECK(refused.status == 503);
  CHECK(refused.body.find("too many connections (4, --max-connections)") != std::string::npos);
  held.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto after = http_test::parse_answer(exchange(l.port(), "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  CHECK(after.body.find("loading model") != std::string::npos);  // served again
}

}  // namespace
}  // namespace waste::serve

namespace waste::serve {
namespace {

// An answer that has news when the test says so, and wakes the connection then
// (StreamedBody/DeferredReply::set_waker).
struct Waking {
  std::mutex m;
  std::string pending;
  bool done = false;
  std::function<void()> wake;
  void set(std::function<void()> w) {
    std::lock_guard lock(m);
    wake = std::move(w);
  }
  bool has_waker() {
    std::lock_guard lock(m);
    return bool(wake);
  }
  void add(const std::string& text, bool last) {
    std::function<void()> w;
    {
      std::lock_guard lock(m);
      pending += text;
      done = last;
      w = wake;
    }
    if (w) w();
  }
};

struct WakingBody final : http::StreamedBody {
  std::shared_ptr<Waking> w = std::make_shared<Waking>();
  bool poll(std::string& out) override {
    std::lock_guard lock(w->m);
    out += std::exchange(w->pending, {});
    return w->done;
  }
  void client_gone() override {}
  void set_waker(std::function<void()> wake) override { w->set(std::move(wake)); }
};

struct WakingDeferred final : http::DeferredReply {
  std::shared_ptr<Waking> w = std::make_shared<Waking>();
  std::optional<http::Reply> poll() override {
    std::lock_guard lock(w->m);
    if (!w->done) return std::nullopt;
    http::Reply r;
    r.content_type = "text/plain";
    r.body = w->pending;
    return r;
  }
  void client_gone() override {}
  void set_waker(std::function<void()> wake) override { w->set(std::move(wake)); }
};

struct WakingHandler final : http::HttpHandler {
  std::shared_ptr<Waking> news;
  bool streamed = true;
  void handle(http::HttpRequest, http::Respond respond) override {
    http::Reply r;
    if (streamed) {
      auto body = std::make_shared<WakingBody>();
      news = body->w;
      r.content_type = "text/event-stream";
      r.stream = std::move(body);
    } else {
      auto deferred = std::make_shared<WakingDeferred>();
      news = deferred->w;
      r.deferred = std::move(deferred);
    }
    respond(std::move(r));
  }
  http::Reply refuse(const http::Refusal&) override { return http::Reply{400}; }
};

}  // namespace

// Hazard: a streamed token (or a blocking answer) waited for the transport's next poll tick (10 ms
// each time: served tokens came at multiples of 10 ms). With the answer's waker the connection
// sends it at once. Here the tick is a minute, so what arrives within 10 s came by the waker.
TEST_CASE("HttpTransport: an answer's news is sent when it wakes the connection, not at the next tick",
          "[serve][http]") {
  for (const bool streamed : {true, false}) {
    INFO((streamed ? "streamed" : "deferred"));
    HttpLimits limits;
    limits.poll_ms = 60000;
    WakingHandler handler;
    handler.streamed = streamed;
    http::HttpTransport transport(limits, handler);
    REQUIRE(transport.start("127.0.0.1", 0));
    http_test::RawSocket s(transport.port());
    REQUIRE(s.ok());
    REQUIRE(s.send_all("GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    std::thread producer([&] {
      for (int i = 0; i < 500 && !(handler.news && handler.news->has_waker()); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!handler.news) return;
      handler.news->add("first ", false);
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      handler.news->add("second", true);
    });
    const std::string answer = s.read_all(std::chrono::seconds(10));
    producer.join();
    REQUIRE(handler.news);
    CHECK(answer.find("HTTP/1.1 200 OK") == 0);
    if (streamed) {
      CHECK(answer.find("6\r\nfirst \r\n") != std::string::npos);
      CHECK(answer.find("6\r\nsecond\r\n0\r\n\r\n") != std::string::npos);
    } else {
      CHECK(http_test::parse_answer(answer).body == "first second");
    }
    transport.stop();
  }
}

}  // namespace waste::serve
