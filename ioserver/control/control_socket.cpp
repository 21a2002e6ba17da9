#include "ioserver/control/control_socket.hpp"

namespace waste::ioserver {

std::optional<ipc::PeerCredentials> peer_of(zmq::message_t& msg) {
  try {
    const char* address = msg.gets("Peer-Address");
    return address != nullptr ? ipc::parse_peer_address(address) : std::nullopt;
  } catch (const zmq::error_t&) {
    return std::nullopt;   // no such property (a libzmq without SO_PEERCRED)
  }
}

}  // namespace waste::ioserver
