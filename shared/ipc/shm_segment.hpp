// One shared-memory segment as a file in a tmpfs (default /dev/shm, where a file named N is the
// POSIX shm object "/N") or hugetlbfs directory, or as anonymous MAP_SHARED memory (an IoServer
// running inside its client's process: no name at all). RAII: the mapping is unmapped when the
// last owner goes; a created file is unlinked by remove() (the creator's decision, not the
// destructor's, so a mapping can outlive the name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "shared/result.hpp"

namespace waste::ipc {

// The directory segments go to when none is configured.
inline const std::filesystem::path kDefaultShmDir = "/dev/shm";

class ShmSegment {
 public:
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // dir/name, O_CREAT|O_EXCL, mode 0600, `bytes` rounded up to the file system's block size
  // (the huge page size on hugetlbfs), mapped read-write. Zero-filled.
  static Result<ShmSegment> create(const std::filesystem::path& dir, const std::string& name, std::uint64_t bytes);
  // Private anonymous memory of `bytes` (zero-filled), no name, for a process that is its own
  // daemon: 2 MB-aligned and advised for huge pages from 2 MB up (shared/memory/anon_memory.hpp).
  static Result<ShmSegment> create_private(std::uint64_t bytes);
  // An existing segment, whole file, read-only or read-write.
  static Result<ShmSegment> open(const std::filesystem::path& dir, const std::string& name, bool writable);

  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return {static_cast<std::byte*>(addr_), size_}; }
  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(addr_); }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }  // empty when private
  [[nodiscard]] bool mapped() const noexcept { return addr_ != nullptr; }
  // Drop write permission on the file (0400): later opens can only be read-only.
  void make_read_only() const noexcept;
  // Unlink the file (the mapping stays until destruction). Idempotent; no-op when private.
  void remove() noexcept;

 private:
  void* addr_ = nullptr;
  std::uint64_t size_ = 0;
  std::filesystem::path path_;
  bool owns_name_ = false;
};

// Bytes free for an unprivileged writer in `dir` (statvfs f_bavail * f_frsize) and its block size.
struct ShmSpace {
  std::uint64_t free_bytes = 0;
  std::uint64_t block_bytes = 0;
};
Result<ShmSpace> shm_space(const std::filesystem::path& dir);

// Refuses when `dir` has less than `needed` bytes free; the error names both sizes and the remedy.
Status check_shm_space(const std::filesystem::path& dir, std::uint64_t needed);

// Human-readable size: "60.0 MB", "2.10 GB" (decimal units, as df -H).
std::string format_shm_bytes(std::uint64_t bytes);

}  // namespace waste::ipc
