// Names of the shared-memory segments and the control socket of one waste-ioserver instance.
// Every name derives from the user id and the instance name, so two users (or two instances of
// one user) never collide, and a client that knows the instance finds everything.
#pragma once

#include <string>
#include <string_view>

#include "shared/result.hpp"

namespace waste::ipc {

// Instance names become part of POSIX shm names and socket paths: [A-Za-z0-9._-], 1..64 chars.
Status validate_instance_name(std::string_view instance);

// "waste_<uid>_<instance>_arena": control block, rings, slot table and the expert arena.
std::string arena_segment_name(std::string_view instance);
// "waste_<uid>_<instance>_trunk": the read-only trunk image all clients map.
std::string trunk_segment_name(std::string_view instance);
// The control socket's endpoint is ipc::socket_endpoint() in runtime_dir.hpp.

}  // namespace waste::ipc
