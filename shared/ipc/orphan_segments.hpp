// Shared-memory segments whose daemon died and whose info file is gone too (a crash during a
// test with a private runtime dir, a removed /tmp): found by scanning /dev/shm for this user's
// waste segments and reading the daemon pid from the arena header.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace waste::ipc {

// Removes every arena segment of this user whose header names a daemon that is not running
// (and its trunk, wake and ring segments); returns what was removed. Only instances whose name starts with
// `instance_prefix` are considered (tests keep to their own).
std::vector<std::string> remove_orphan_segments(std::string_view instance_prefix = {});

}  // namespace waste::ipc
