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

inline constexpr std::chrono::milliseconds kDefaultControlTimeout{1500};

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

  Result<nlohmann::json> ping();
  Result<AttachReply> attach(const AttachRequest& request);
  Status detach(int client_idx);
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
  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> socket_;
};

}  // namespace waste::ipc
