#include "shared/memory/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

namespace waste {

namespace {

// 1: locked and the path still names the locked inode; 0: busy; -1: error (errno).
int lock_once(const std::filesystem::path& path, int& fd_out) {
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      ::close(fd);
      if (e == EWOULDBLOCK || e == EINTR) return 0;
      errno = e;
      return -1;
    }
    // The previous holder may have unlinked the file between our open and our flock.
    struct stat held{}, named{};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      fd_out = fd;
      return 1;
    }
    ::close(fd);
  }
}

}  // namespace

Result<std::optional<FileLock>> FileLock::try_acquire(const std::filesystem::path& path) {
  int fd = -1;
  const int r = lock_once(path, fd);
  if (r < 0) return make_error(Errc::io, path.string() + ": cannot lock: " + std::strerror(errno));
  if (r == 0) return std::optional<FileLock>{};
  return std::optional<FileLock>(FileLock(path, fd));
}

Result<FileLock> FileLock::acquire(const std::filesystem::path& path, std::chrono::milliseconds wait,
                                   const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    auto got = try_acquire(path);
    if (!got) return std::unexpected(got.error());
    if (*got) return std::move(**got);
    if (std::chrono::steady_clock::now() >= deadline) {
      return make_error(Errc::ipc, path.string() + ": still locked after " + std::to_string(wait.count()) + " ms (" +
                                       what + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

FileLock::FileLock(FileLock&& other) noexcept : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

void FileLock::unlink_and_release() noexcept {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

}  // namespace waste
