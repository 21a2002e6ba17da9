// Names of the shared-memory segments and the control socket of one waste-ioserver instance.
// Every name derives from the user id and the instance name, so two users (or two instances of
// one user) never collide, and a client that knows the instance finds everything.
#pragma once

#include <cstdint>
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
// "waste_<uid>_<instance>_wake": the daemon's doorbell, rung by every client.
std::string wake_segment_name(std::string_view instance);
// "waste_<uid>_<instance>_c<idx>_g<generation>": one lease's ring pair. Index AND generation, so
// a reused index always gets a new file and a stale client can never reach its successor's rings.
std::string ring_segment_name(std::string_view instance, int client_idx, std::uint64_t generation);
// Prefix of every ring segment of `instance` ("waste_<uid>_<instance>_c"), for stale cleanup.
std::string ring_segment_prefix(std::string_view instance);
// The same two names derived from an arena segment name (a lease that carries only that).
// Empty when `arena_name` does not end in "_arena".
std::string wake_segment_name_for_arena(std::string_view arena_name);
std::string ring_segment_name_for_arena(std::string_view arena_name, int client_idx, std::uint64_t generation);
// The control socket's endpoint is ipc::socket_endpoint() in runtime_dir.hpp.

}  // namespace waste::ipc
