// Who is at the other end of a control-socket request, as the kernel says (SO_PEERCRED), not as
// the request's JSON claims. libzmq reads SO_PEERCRED when an ipc:// connection is accepted and
// hands it on as each message's "Peer-Address" property: "<address>:<uid>:<gid>:<pid>" (the
// address part is empty for an unnamed Unix socket). The daemon attaches a client under this pid.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace waste::ipc {

struct PeerCredentials {
  int pid = 0;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
};

// The credentials in a "Peer-Address" value; nullopt unless it ends in ":uid:gid:pid" with three
// decimal numbers and a positive pid (a TCP peer, or a libzmq built without SO_PEERCRED).
std::optional<PeerCredentials> parse_peer_address(std::string_view text);

}  // namespace waste::ipc
