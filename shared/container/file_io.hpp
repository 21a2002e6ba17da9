// Small POSIX helpers for the container readers and writer: an owning file descriptor,
// full-length pread/pwrite loops, whole-file reads and an atomic replace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "shared/result.hpp"

namespace waste {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  int release() noexcept { int fd = fd_; fd_ = -1; return fd; }

 private:
  int fd_ = -1;
};

// open(2) with O_CLOEXEC; the error names the path and errno text.
Result<UniqueFd> open_file(const std::filesystem::path& path, int flags, int mode = 0644);
Result<std::uint64_t> file_size(int fd, const std::filesystem::path& path_for_errors);

// Reads until `out` is full or EOF; returns the bytes read (short only at EOF).
Result<std::size_t> pread_full(int fd, std::span<std::byte> out, std::uint64_t offset);
Status write_all(int fd, std::span<const std::byte> bytes, const std::filesystem::path& path_for_errors);

// Whole small file (manifest, specials), bounded so a hostile file cannot exhaust memory.
Result<std::string> read_text_file(const std::filesystem::path& path, std::uint64_t max_bytes);

// Write to "<path>.tmp", fsync, rename over `path`: readers see the old file or the new one.
Status write_file_atomic(const std::filesystem::path& path, std::string_view contents);

}  // namespace waste
