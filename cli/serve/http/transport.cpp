// First: it sets how Boost's assertions are compiled here (see there).
#include "cli/serve/http/request_parser.hpp"
#include "cli/serve/http/transport.hpp"

#include <poll.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>

#include "cli/serve/http/wire.hpp"

namespace waste::serve::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
namespace bh = boost::beast::http;

constexpr int kPeerCheckTicks = 10;  // the socket is checked every 10 polls (100 ms at the default poll_ms when idle)
constexpr std::size_t kBufferSlack = 8u << 10;                 // read buffer beyond the header limit
constexpr std::size_t kLingerChunk = 16u << 10;

// A parse error or a limit (answered), as opposed to the socket ending (closed quietly).
bool is_parse_error(const error_code& ec) {
  if (ec == bh::error::end_of_stream || ec == bh::error::partial_message) return false;
  return ec.category() == bh::make_error_code(bh::error::header_limit).category();
}

// The peer closed or reset its side (POLLRDHUP: a FIN has arrived). Never blocks.
bool peer_gone(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// The socket as the request parser reads it. Cancelling the socket at the deadline misses a read
// whose bytes were already taken (its completion queued on the strand beside the deadline's); the
// parser's next read would then wait on the socket with no deadline left, and a client trickling
// bytes would be read for ever. So once `expired` is set, every read through here ends at once
// with operation_aborted instead of reaching the socket.
class GatedReads {
 public:
  using executor_type = tcp::socket::executor_type;
  GatedReads(tcp::socket& socket, const bool& expired) : socket_(socket), expired_(expired) {}
  executor_type get_executor() { return socket_.get_executor(); }

  template <class Buffers, class Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(error_code, std::size_t)>(
        [this](auto handler, const Buffers& b) {
          if (!expired_) return socket_.async_read_some(b, std::move(handler));
          asio::post(socket_.get_executor(), [h = std::move(handler)]() mutable {
            std::move(h)(error_code(asio::error::operation_aborted), std::size_t{0});
          });
        },
        token, buffers);
  }

 private:
  tcp::socket& socket_;
  const bool& expired_;
};

}  // namespace

struct HttpTransport::Impl {
  Impl(HttpLimits l, HttpHandler& h) : limits(l), handler(h) {}

  HttpLimits limits;
  HttpHandler& handler;
  std::atomic<int> live{0};
  std::atomic<bool> stopping{false};
  int port = 0;
  class Connection;
  std::mutex registry_mutex;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> registry;
  // Destroyed before the members above: connections still queued in it unregister themselves.
  asio::io_context io{limits.io_threads};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> accept_retry;
  std::vector<std::thread> threads;

  void accept();
  void refuse_overloaded(tcp::socket& socket);
};

// One client connection. Every member is used on the connection's strand only.
class HttpTransport::Impl::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Impl& owner, tcp::socket socket)
      : owner_(owner),
        limits_(owner.limits),
        socket_(std::move(socket)),
        reads_(socket_, timed_out_),
        deadline_(socket_.get_executor()),
        tick_(socket_.get_executor()),
        buffer_(limits_.header_bytes + kBufferSlack) {
    owner_.live.fetch_add(1, std::memory_order_relaxed);
  }
  ~Connection() {
    {
      std::lock_guard lock(owner_.registry_mutex);
      owner_.registry.erase(this);
    }
    owner_.live.fetch_sub(1, std::memory_order_relaxed);
  }

  void start() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->begin_request(true); });
  }

  // Server stopping: a connection between requests, or with a request not yet read in full, is
  // closed now; one that is answering finishes its answer (then closes: keep-alive ends).
  void on_stop() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
      if (self->state_ == State::idle || self->state_ == State::reading) self->close();
    });
  }

 private:
  enum class State { idle, reading, handling, waiting, streaming, writing, lingering, closed };

  // ---- deadlines: one timer; a generation number makes a stale expiry harmless.
  void arm(int seconds) {
    const std::uint64_t generation = ++deadline_generation_;
    deadline_.expires_after(std::chrono::seconds(seconds));
    deadline_.async_wait([self = shared_from_this(), generation](const error_code& ec) {
      if (ec || generation != self->deadline_generation_) return;
      self->on_deadline();
    });
  }
  void disarm() {
    ++deadline_generation_;
    deadline_.cancel();
  }
  void on_deadline() {
    timed_out_ = true;
    error_code ignored;
    if (state_ == State::reading || state_ == State::idle) {
      socket_.cancel(ignored);  // the read ends with operation_aborted; read_failed() answers
    } else {
      close();  // a write or a linger past its deadline
    }
  }

  [[nodiscard]] bool got_bytes() const { return buffer_.size() > 0 || (parser_ && parser_->got_some()); }

  // ---- reading a request
  void begin_request(bool first) {
    if (state_ == State::closed) return;
    if (owner_.stopping.load(std::memory_order_acquire) && !first) return close();
    parser_.emplace();
    apply_limits(*parser_, limits_);
    timed_out_ = false;
    if (first || buffer_.size() > 0) {
      state_ = State::reading;
      arm(limits_.request_seconds);  // from accept (or from the pipelined bytes already here)
      return read_header();
    }
    // Kept alive: wait for the next request's first byte, then its deadline starts.
    state_ = State::idle;
    arm(limits_.keep_alive_seconds);
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const error_code& ec) {
      if (self->state_ == State::closed) return;
      if (ec || self->timed_out_) return self->close();
      self->state_ = State::reading;
      self->arm(self->limits_.request_seconds);
      self->read_header();
    });
  }

  void read_header() {
    bh::async_read_header(reads_, buffer_, *parser_, [self = shared_from_this()](const error_code& ec, std::size_t) {
      self->on_header(ec);
    });
  }

  void on_header(const error_code& ec) {
    if (state_ == State::closed) return;
    if (ec) return read_failed(ec);
    if (Refusal refusal; too_many_fields(*parser_, limits_, refusal)) return refuse(std::move(refusal));
    const auto& head = parser_->get();
    const auto expect = head.find(bh::field::expect);
    if (expect != head.end() && !parser_->is_done() && boost::beast::iequals(expect->value(), "100-continue")) {
      asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = shared_from_this()](const error_code& wec, std::size_t) {
                          if (self->state_ == State::closed) return;
                          if (wec) return self->close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    bh::async_read(reads_, buffer_, *parser_, [self = shared_from_this()](const error_code& ec, std::size_t) {
      if (self->state_ == State::closed) return;
      if (ec) return self->read_failed(ec);
      self->disarm();
      self->handle();
    });
  }

  void read_failed(const error_code& ec) {
    disarm();
    if (timed_out_) {
      // Past the whole-request deadline: a client that sent part of a request is told so.
      if (!got_bytes()) return close();
      return refuse(Refusal{400,
                            "the request did not arrive in full within " + std::to_string(limits_.request_seconds) +
                                " s (--request-timeout)",
                            "request_timeout", ""});
    }
    if (!is_parse_error(ec)) return close();
    Refusal refusal = refusal_for(ec, parser_->is_header_done(), limits_);
    if (parser_->is_header_done()) {
      const std::string target(parser_->get().target().data(), parser_->get().target().size());
      refusal.path = target.substr(0, target.find('?'));
    }
    refuse(std::move(refusal));
  }

  // ---- answering
  void handle() {
    state_ = State::handling;
    ++served_;
    keep_alive_ = parser_->get().keep_alive() && served_ < limits_.keep_alive_requests &&
                  !owner_.stopping.load(std::memory_order_acquire);
    HttpRequest request = to_request(*parser_);
    version_ = request.version;
    parser_.reset();
    Respond respond = [self = shared_from_this()](Reply reply) {
      asio::post(self->socket_.get_executor(),
                 [self, reply = std::move(reply)]() mutable { self->on_reply(std::move(reply)); });
    };
    owner_.handler.handle(std::move(request), std::move(respond));
  }

  // A refusal by the transport: answered, then the connection is closed (what else the client
  // sends is read and discarded for a short while, so the answer is not lost to a reset).
  void refuse(Refusal refusal) {
    keep_alive_ = false;
    state_ = State::handling;
    on_reply(owner_.handler.refuse(refusal));
  }

  void on_reply(Reply reply) {
    if (state_ == State::closed) {
      if (reply.deferred) reply.deferred->client_gone();
      if (reply.stream) reply.stream->client_gone();
      return;
    }
    if (reply.deferred) {
      deferred_ = std::move(reply.deferred);
      deferred_->set_waker(waker());
      state_ = State::waiting;
      return schedule_tick();
    }
    if (reply.stream) {
      stream_ = std::move(reply.stream);
      stream_->set_waker(waker());
      chunked_ = version_ >= 11;
      if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the body ends at close
      state_ = State::streaming;
      write(response_head(reply, chunked_ ? BodyFraming::chunked : BodyFraming::until_close, keep_alive_), false);
      return;
    }
    state_ = State::writing;
    write(response_bytes(reply, keep_alive_), true);
  }

  // Writes `bytes` under the write deadline; `last`: the reply is complete after it.
  void write(std::string bytes, bool last) {
    out_ = std::move(bytes);
    arm(limits_.write_seconds);
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this(), last](const error_code& ec, std::size_t) {
      if (self->state_ == State::closed) return;
      self->disarm();
      if (ec) return self->close();
      if (!last) return self->schedule_tick();
      self->stream_.reset();
      if (self->keep_alive_) return self->begin_request(false);
      self->linger();
    });
  }

  // The next poll: at the tick, or now when the answer woke us (wake()) since the last poll.
  void schedule_tick() {
    if (wake_pending_) {
      wake_pending_ = false;
      asio::post(socket_.get_executor(), [self = shared_from_this()] { self->on_tick(); });
      return;
    }
    tick_armed_ = true;
    tick_.expires_after(std::chrono::milliseconds(limits_.poll_ms));
    tick_.async_wait([self = shared_from_this()](const error_code& ec) {
      self->tick_armed_ = false;
      if (!ec || (ec == asio::error::operation_aborted && self->wake_pending_)) {
        self->wake_pending_ = false;
        self->on_tick();
      }
    });
  }

  // What a deferred or streamed answer calls (any thread) when it has news: the connection polls
  // it now, not at the next tick (a token waited up to HttpLimits::poll_ms for it before).
  std::function<void()> waker() {
    return [weak = weak_from_this()] {
      if (auto self = weak.lock()) {
        asio::post(self->socket_.get_executor(), [self] {
          if (self->state_ == State::closed) return;
          self->wake_pending_ = true;
          if (self->tick_armed_) self->tick_.cancel();  // its handler sees the wake and polls
        });
      }
    };
  }

  void on_tick() {
    if (state_ == State::closed) return;
    if (++ticks_ % kPeerCheckTicks == 0 && peer_gone(socket_.native_handle())) return close();
    if (state_ == State::waiting) {
      std::optional<Reply> reply = deferred_->poll();
      if (!reply) return schedule_tick();
      deferred_.reset();
      state_ = State::handling;
      return on_reply(std::move(*reply));
    }
    if (state_ == State::streaming) {
      std::string data;
      const bool done = stream_->poll(data);
      if (data.empty() && !done) return schedule_tick();
      std::string bytes;
      if (chunked_) {
        append_chunk(bytes, data);
        if (done) bytes += kLastChunk;
      } else {
        bytes = std::move(data);
      }
      if (bytes.empty()) {  // done with nothing left to send (HTTP/1.0)
        stream_.reset();
        return linger();
      }
      write(std::move(bytes), done);
    }
  }

  // After the last answer on a connection: send FIN, then read and discard until the client
  // closes too or linger_seconds pass (so unread request bytes do not turn the close into a
  // reset that loses the answer).
  void linger() {
    state_ = State::lingering;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    if (!scratch_) scratch_ = std::make_unique<char[]>(kLingerChunk);
    arm(limits_.linger_seconds);
    read_discard();
  }
  void read_discard() {
    socket_.async_read_some(asio::buffer(scratch_.get(), kLingerChunk),
                            [self = shared_from_this()](const error_code& ec, std::size_t) {
                              if (self->state_ == State::closed) return;
                              if (ec) return self->close();
                              self->read_discard();
                            });
  }

  void close() {
    if (state_ == State::closed) return;
    state_ = State::closed;
    disarm();
    tick_.cancel();
    if (deferred_) std::exchange(deferred_, nullptr)->client_gone();
    if (stream_) std::exchange(stream_, nullptr)->client_gone();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  Impl& owner_;
  const HttpLimits& limits_;
  bool timed_out_ = false;  // before reads_, which holds a reference to it
  tcp::socket socket_;
  GatedReads reads_;
  asio::steady_timer deadline_;
  asio::steady_timer tick_;
  boost::beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  State state_ = State::reading;
  std::uint64_t deadline_generation_ = 0;
  bool keep_alive_ = false;
  bool chunked_ = false;
  unsigned version_ = 11;
  int served_ = 0;
  std::uint64_t ticks_ = 0;
  bool tick_armed_ = false;    // tick_ has a wait pending
  bool wake_pending_ = false;  // the answer has news since the last poll
  std::string out_;
  std::shared_ptr<DeferredReply> deferred_;
  std::shared_ptr<StreamedBody> stream_;
  std::unique_ptr<char[]> scratch_;
};

void HttpTransport::Impl::refuse_overloaded(tcp::socket& socket) {
  const Reply reply = handler.refuse(Refusal{503,
                                             "too many connections (" + std::to_string(limits.max_connections) +
                                                 ", --max-connections); retry later",
                                             "too_many_connections", ""});
  const std::string bytes = response_bytes(reply, false);
  error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(asio::buffer(bytes), ignored);  // best effort: never waits
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
}

void HttpTransport::Impl::accept() {
  acceptor->async_accept(asio::make_strand(io), [this](const error_code& ec, tcp::socket socket) {
    if (stopping.load(std::memory_order_acquire) || ec == asio::error::operation_aborted) return;
    if (ec) {  // out of descriptors, ...: try again shortly rather than spin
      accept_retry->expires_after(std::chrono::milliseconds(50));
      accept_retry->async_wait([this](const error_code& wec) {
        if (!wec && !stopping.load(std::memory_order_acquire)) accept();
      });
      return;
    }
    if (live.load(std::memory_order_relaxed) >= limits.max_connections) {
      refuse_overloaded(socket);
    } else {
      auto connection = std::make_shared<Connection>(*this, std::move(socket));
      {
        std::lock_guard lock(registry_mutex);
        registry.emplace(connection.get(), connection);
      }
      connection->start();
    }
    accept();
  });
}

HttpTransport::HttpTransport(HttpLimits limits, HttpHandler& handler)
    : impl_(std::make_unique<Impl>(limits, handler)) {}

HttpTransport::~HttpTransport() { stop(); }

Status HttpTransport::start(const std::string& host, int port) {
  Impl& m = *impl_;
  const std::string where = host + ":" + std::to_string(port);
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return make_error(Errc::io, "cannot bind " + where + ": '" + host + "' is not an IP address");
  tcp::acceptor acceptor(m.io);
  const tcp::endpoint endpoint(address, std::uint16_t(port));
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(m.limits.accept_queue, ec);
  if (ec) return make_error(Errc::io, "cannot bind " + where + ": " + ec.message());
  m.port = acceptor.local_endpoint().port();
  m.acceptor.emplace(std::move(acceptor));
  m.accept_retry.emplace(m.io);
  m.work.emplace(m.io.get_executor());
  m.accept();
  for (int i = 0; i < std::max(1, m.limits.io_threads); ++i) m.threads.emplace_back([&m] { m.io.run(); });
  return ok();
}

int HttpTransport::port() const { return impl_->port; }

int HttpTransport::connections() const { return impl_->live.load(std::memory_order_relaxed); }

void HttpTransport::stop() {
  Impl& m = *impl_;
  if (m.threads.empty()) return;
  m.stopping.store(true, std::memory_order_release);
  asio::post(m.io, [&m] {
    error_code ignored;
    m.acceptor->close(ignored);
    m.accept_retry->cancel();
  });
  std::vector<std::shared_ptr<Impl::Connection>> open;
  {
    std::lock_guard lock(m.registry_mutex);
    for (auto& [_, weak] : m.registry) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) c->on_stop();
  open.clear();
  // Answers in progress end within their write deadline (the engine has stopped, so every
  // stream is finished or cancelled by now); lingering ones within linger_seconds.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(std::max(m.limits.write_seconds, m.limits.linger_seconds) + 1);
  while (m.live.load(std::memory_order_relaxed) > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  m.work.reset();
  m.io.stop();
  for (auto& t : m.threads) t.join();
  m.threads.clear();
}

}  // namespace waste::serve::http
