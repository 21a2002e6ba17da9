// An exclusive flock(2) on a file in the runtime dir, held by one object (RAII). Used for the
// per-instance start lock clients take around discovery + spawn, the daemon's lifetime lock
// (a new daemon for an instance waits for its predecessor's teardown) and the machine ledger.
// Holders may unlink the file before releasing it, so nothing stays in the runtime dir; an
// acquirer that then finds its inode unlinked opens the path again (no lock on a dead inode).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>

#include "shared/result.hpp"

namespace waste {

class FileLock {
 public:
  // Waits up to `wait` (polling every 10 ms). Errc::io when the file cannot be opened,
  // Errc::ipc "PATH: still locked after N ms (what)" when it stays held.
  static Result<FileLock> acquire(const std::filesystem::path& path, std::chrono::milliseconds wait,
                                  const char* what);
  // nullopt when another holder has it now.
  static Result<std::optional<FileLock>> try_acquire(const std::filesystem::path& path);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();   // releases (the file stays unless unlink_and_release ran)

  // Removes the file while still holding it, then releases.
  void unlink_and_release() noexcept;
  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  FileLock(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace waste
