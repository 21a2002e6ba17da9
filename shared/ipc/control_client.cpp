#include "shared/ipc/control_client.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <zmq.hpp>

#include "shared/ipc/runtime_dir.hpp"

namespace waste::ipc {

using nlohmann::json;

namespace {

// Whether something listens on a Unix socket file: a daemon killed with -9 leaves its file behind.
// Checked here once, at connect, because the REQ socket queues rather than refuses (see open_socket).
Status probe_listener(const std::filesystem::path& file) {
  sockaddr_un addr{};
  if (file.native().size() >= sizeof addr.sun_path) return ok();   // zmq reports what it cannot reach
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, file.c_str(), file.native().size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ok();
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err == ECONNREFUSED) {
    return make_error(Errc::ipc, "no waste-ioserver listens at " + file.string() +
                                     " (a stale socket file: its daemon exited without removing it)");
  }
  return ok();
}

}  // namespace

ControlClient::ControlClient(std::string endpoint, std::chrono::milliseconds timeout)
    : endpoint_(std::move(endpoint)), timeout_(timeout), context_(std::make_unique<zmq::context_t>(1)) {}

ControlClient::ControlClient(ControlClient&&) noexcept = default;
ControlClient& ControlClient::operator=(ControlClient&&) noexcept = default;

ControlClient::~ControlClient() {
  socket_.reset();   // before the context: closing a context with open sockets blocks
  context_.reset();
}

Result<ControlClient> ControlClient::connect(std::string endpoint, std::chrono::milliseconds timeout) {
  if (endpoint.rfind("ipc://", 0) == 0) {
    const std::filesystem::path file = endpoint.substr(6);
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) {
      return make_error(Errc::ipc, "no waste-ioserver socket at " + file.string());
    }
    WASTE_TRY(probe_listener(file));
  }
  ControlClient client(std::move(endpoint), timeout);
  WASTE_TRY(client.open_socket());
  return client;
}

Status ControlClient::open_socket() {
  try {
    socket_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::req);
    const int ms = int(timeout_.count());
    socket_->set(zmq::sockopt::linger, 0);          // never block process exit on a dead peer
    socket_->set(zmq::sockopt::rcvtimeo, ms);
    socket_->set(zmq::sockopt::sndtimeo, ms);
    // Not ZMQ_IMMEDIATE: with it, a peer that closes right after its reply (a daemon whose drain
    // that reply ended) makes libzmq drop the pipe, the unread reply with it. A stale socket file
    // is caught by connect's probe instead.
    socket_->connect(endpoint_);
  } catch (const zmq::error_t& e) {
    socket_.reset();
    return make_error(Errc::ipc, endpoint_ + ": " + e.what());
  }
  return ok();
}

Result<json> ControlClient::call(const json& request) { return call(request, timeout_); }

Result<json> ControlClient::call(const json& request, std::chrono::milliseconds timeout) {
  if (!socket_) WASTE_TRY(open_socket());
  const std::string text = request.dump();
  const auto give_up = [&](std::string why) {
    // A REQ socket that missed its reply cannot send again; start over next call.
    socket_.reset();
    return make_error(Errc::ipc, std::move(why));
  };
  const auto timed_out = [&](const char* what) {
    return give_up("waste-ioserver at " + endpoint_ + " did not " + what + " within " +
                   std::to_string(timeout.count()) + " ms (is it running?)");
  };
  const auto exited = [&] {
    return give_up("waste-ioserver (pid " + std::to_string(follow_pid_) + ") at " + endpoint_ +
                   " exited before answering");
  };
  try {
    if (!socket_->send(zmq::buffer(text), zmq::send_flags::none)) return timed_out("accept the request");
    // Wait in slices so a followed daemon that dies is noticed at once, not at the deadline.
    constexpr std::chrono::milliseconds kSlice{100};
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return timed_out("answer");
      zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::min(left, kSlice));
      if (item.revents & ZMQ_POLLIN) break;
      if (follow_pid_ > 0 && !process_alive(follow_pid_)) {
        // Its last reply may still be on the way (a shutdown answers, then exits): one more look.
        zmq::poll(&item, 1, kSlice);
        if (item.revents & ZMQ_POLLIN) break;
        return exited();
      }
    }
    zmq::message_t reply;
    if (!socket_->recv(reply, zmq::recv_flags::dontwait)) return timed_out("answer");
    return parse_reply(reply.to_string_view());
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return give_up(endpoint_ + ": interrupted");
    socket_.reset();
    return make_error(Errc::ipc, endpoint_ + ": " + e.what());
  }
}

Result<json> ControlClient::ping() { return call(make_request("ping")); }

Result<AttachReply> ControlClient::attach(const AttachRequest& request) { return attach(request, timeout_); }

Result<AttachReply> ControlClient::attach(const AttachRequest& request, std::chrono::milliseconds timeout) {
  auto reply = call(make_request("attach", to_json(request)), timeout);
  if (!reply) return std::unexpected(reply.error());
  return attach_reply_from_json(*reply);
}

Status ControlClient::detach(const DetachRequest& request) {
  auto reply = call(make_request("detach", to_json(request)));
  if (!reply) return std::unexpected(reply.error());
  return ok();
}

Status ControlClient::heartbeat(int client_idx, int pid) {
  auto reply = call(make_request("heartbeat", json{{"client_idx", client_idx}, {"pid", pid}}));
  if (!reply) return std::unexpected(reply.error());
  return ok();
}

Result<json> ControlClient::stats() { return call(make_request("stats")); }

Result<json> ControlClient::configure(const ConfigRequest& request) {
  return call(make_request("config", to_json(request)));
}

Status ControlClient::shutdown(int drain_ms) {
  auto reply = call(make_request("shutdown", json{{"drain_ms", drain_ms}}));
  // A followed daemon that exited is what shutdown asked for, answered or not.
  if (!reply && !(follow_pid_ > 0 && !process_alive(follow_pid_))) return std::unexpected(reply.error());
  return ok();
}

}  // namespace waste::ipc
