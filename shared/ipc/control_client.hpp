// Client side of the control plane: one REQ socket to one waste-ioserver, every call bounded
// by a timeout so a dead or wedged daemon is a clear error, never a hang. Not thread-safe:
// use one ControlClient per thread (the heartbeat thread has its own).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "shared/ipc/protocol.hpp"
#include "shared/result.hpp"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace waste::ipc {

// Liveness: how long an established daemon may take to answer one request.
inline constexpr std::chrono::milliseconds kDefaultControlTimeout{1500};
// Start-up: how long a daemon that is still starting (spawned by us, or younger than this) may
// take to answer its first request, as long as its pid lives. Generous: on a loaded 2-core
// machine a freshly started daemon missed the 1.5 s liveness bound (docs/LEARNED.md).
inline constexpr std::chrono::milliseconds kStartupControlTimeout{30000};

class ControlClient {
 public:
  // `endpoint` is "ipc://<path>". Fails at once when the socket file does not exist.
  static Result<ControlClient> connect(std::string endpoint,
                                       std::chrono::milliseconds timeout = kDefaultControlTimeout);
  ControlClient(ControlClient&&) noexcept;
  ControlClient& operator=(ControlClient&&) noexcept;
  ~ControlClient();

  // Sends a request (built with make_request) and returns the reply, or the error it carries.
  // Errc::ipc: "waste-ioserver at ipc://... did not answer within 1500 ms".
  Result<nlohmann::json> call(const nlohmann::json& request);
  // The same with this call's own bound on the reply (e.g. kStartupControlTimeout).
  Result<nlohmann::json> call(const nlohmann::json& request, std::chrono::milliseconds timeout);

  // Watch the daemon's process while waiting for a reply: when `pid` dies the call fails within
  // ~100 ms ("waste-ioserver (pid N) exited before answering") instead of running out its
  // timeout. 0 (the default) watches nothing.
  void follow_pid(int pid) noexcept { follow_pid_ = pid; }

  Result<nlohmann::json> ping();
  Result<AttachReply> attach(const AttachRequest& request);
  Result<AttachReply> attach(const AttachRequest& request, std::chrono::milliseconds timeout);
  // Names the lease (index, pid, generation): a stale one is refused without effect.
  Status detach(const DetachRequest& request);
  Status heartbeat(int client_idx, int pid);
  Result<nlohmann::json> stats();
  Result<nlohmann::json> configure(const ConfigRequest& request);
  Status shutdown(int drain_ms = 2000);

  [[nodiscard]] const std::string& endpoint() const noexcept { return endpoint_; }

 private:
  ControlClient(std::string endpoint, std::chrono::milliseconds timeout);
  Status open_socket();

  std::string endpoint_;
  std::chrono::milliseconds timeout_;
  int follow_pid_ = 0;
  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> socket_;
};

}  // namespace waste::ipc
