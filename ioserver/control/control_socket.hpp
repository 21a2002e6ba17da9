// The control socket: a ZeroMQ REP socket on ipc://<runtime dir>/waste-<instance>.sock (0600),
// one request, one reply. The Daemon binds it at init and polls it in its run loop; peer_of names
// the process that sent a request (the kernel's word, SO_PEERCRED through libzmq).
#pragma once

#include <optional>

#include <zmq.hpp>

#include "shared/ipc/peer_credentials.hpp"

namespace waste::ioserver {

struct ControlSocket {
  zmq::context_t context{1};
  zmq::socket_t rep{context, zmq::socket_type::rep};
};

// libzmq's "Peer-Address" of a message from an ipc:// peer ends in ":uid:gid:pid" (SO_PEERCRED);
// nullopt when the property is missing (a libzmq without SO_PEERCRED).
std::optional<ipc::PeerCredentials> peer_of(zmq::message_t& msg);

}  // namespace waste::ioserver
