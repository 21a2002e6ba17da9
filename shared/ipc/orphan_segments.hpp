// Shared-memory segments whose daemon died and whose info file is gone too (a crash during a
// test with a private runtime dir, a removed /tmp): found by scanning /dev/shm for this user's
// waste segments and reading the daemon pid from the arena header.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace waste::ipc {

// Removes every arena segment of this user whose header names a daemon that is not running
// (and its trunk segment); returns what was removed. `shm_dir` is a parameter for tests.
std::vector<std::string> remove_orphan_segments(const std::filesystem::path& shm_dir = "/dev/shm");

}  // namespace waste::ipc
