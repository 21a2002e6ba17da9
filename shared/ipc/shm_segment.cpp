#include "shared/ipc/shm_segment.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "shared/memory/anon_memory.hpp"

namespace waste::ipc {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// "user NAME (uid N)", or "uid N" when the password database has no name for it.
std::string user_text(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) {
    return "user " + std::string(found->pw_name) + " (uid " + std::to_string(uid) + ")";
  }
  return "uid " + std::to_string(uid);
}

// Why O_EXCL creation of `path` failed with `err`: a name held by another user says whose it is
// (in a sticky /dev/shm only its owner or root can remove it), everything else the errno text.
std::string create_failure(const std::filesystem::path& path, int err) {
  struct stat st {};
  if (err == EEXIST && ::lstat(path.c_str(), &st) == 0 && st.st_uid != ::geteuid()) {
    return "shared memory segment " + path.string() + " already exists and belongs to " + user_text(st.st_uid) +
           ", not to this process's " + user_text(::geteuid()) +
           ": remove it as that user or root (rm " + path.string() + ")";
  }
  return "shared memory segment " + path.string() + ": " + errno_text(err);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

ShmSegment::~ShmSegment() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : addr_(std::exchange(other.addr_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)),
      owns_name_(std::exchange(other.owns_name_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (addr_ != nullptr) ::munmap(addr_, size_);
    addr_ = std::exchange(other.addr_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
    owns_name_ = std::exchange(other.owns_name_, false);
  }
  return *this;
}

Result<ShmSegment> ShmSegment::create(const std::filesystem::path& dir, const std::string& name, std::uint64_t bytes) {
  auto space = shm_space(dir);
  if (!space) return std::unexpected(space.error());
  const std::uint64_t block = space->block_bytes > 0 ? space->block_bytes : 4096;
  const std::uint64_t size = (bytes + block - 1) / block * block;
  const auto path = dir / name;
  Fd fd{::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)};
  if (fd.fd < 0) return make_error(Errc::io, create_failure(path, errno));
  ShmSegment seg;
  seg.path_ = path;
  seg.owns_name_ = true;
  if (::ftruncate(fd.fd, off_t(size)) != 0) {
    const int e = errno;
    seg.remove();
    return make_error(Errc::io, "shared memory segment " + path.string() + " (" + std::to_string(size) +
                                    " bytes): " + errno_text(e));
  }
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (addr == MAP_FAILED) {
    const int e = errno;
    seg.remove();
    return make_error(Errc::io, "shared memory segment " + path.string() + " (" + std::to_string(size) +
                                    " bytes): mmap: " + errno_text(e));
  }
  seg.addr_ = addr;
  seg.size_ = size;
  return seg;
}

Result<ShmSegment> ShmSegment::create_private(std::uint64_t bytes) {
  auto memory = AnonMemory::allocate(bytes, "private memory");
  if (!memory) return std::unexpected(memory.error());
  ShmSegment seg;
  seg.size_ = memory->size();
  seg.addr_ = memory->release();
  return seg;
}

Result<ShmSegment> ShmSegment::open(const std::filesystem::path& dir, const std::string& name, bool writable) {
  const auto path = dir / name;
  Fd fd{::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW)};
  if (fd.fd < 0) return make_error(Errc::ipc, "cannot open shared memory segment " + path.string() + ": " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0 || st.st_size <= 0) {
    return make_error(Errc::ipc, "shared memory segment " + path.string() + " is empty or unreadable");
  }
  const auto size = std::uint64_t(st.st_size);
  void* addr = ::mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd.fd, 0);
  if (addr == MAP_FAILED) {
    return make_error(Errc::ipc, "cannot map shared memory segment " + path.string() + ": " + errno_text(errno));
  }
  ShmSegment seg;
  seg.addr_ = addr;
  seg.size_ = size;
  seg.path_ = path;
  return seg;
}

void ShmSegment::make_read_only() const noexcept {
  if (!path_.empty()) ::chmod(path_.c_str(), 0400);
}

void ShmSegment::remove() noexcept {
  if (owns_name_ && !path_.empty()) ::unlink(path_.c_str());
  owns_name_ = false;
}

Result<ShmSpace> shm_space(const std::filesystem::path& dir) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) {
    return make_error(Errc::io, "shared memory directory " + dir.string() + ": " + errno_text(errno));
  }
  return ShmSpace{std::uint64_t(vfs.f_bavail) * std::uint64_t(vfs.f_frsize), std::uint64_t(vfs.f_bsize)};
}

std::string format_shm_bytes(std::uint64_t bytes) {
  char buf[32];
  const double b = double(bytes);
  if (b >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  } else if (b >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  } else if (b >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

Status check_shm_space(const std::filesystem::path& dir, std::uint64_t needed) {
  auto space = shm_space(dir);
  if (!space) return std::unexpected(space.error());
  if (space->free_bytes >= needed) return ok();
  std::string remedy = dir == kDefaultShmDir
                           ? "enlarge it (docker run --shm-size=..., or mount -o remount,size=... /dev/shm) or put the "
                             "segments on another tmpfs or hugetlbfs directory with --shm-dir DIR"
                           : "enlarge that file system or choose another directory with --shm-dir DIR";
  return make_error(Errc::io, "shared memory " + dir.string() + " has " + format_shm_bytes(space->free_bytes) +
                                  " free, waste-ioserver's segments need " + format_shm_bytes(needed) + ": " + remedy);
}

}  // namespace waste::ipc
