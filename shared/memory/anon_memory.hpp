// Private anonymous memory for large read-mostly images (the trunk image, a resident embedding
// table, the in-process expert arena), placed so the kernel can back it with 2 MB pages.
//
// The kernels stream these images at memory speed; with 4 KB pages every 4 KB of a row costs a
// TLB walk and the hardware prefetcher stops at each page boundary (docs/LEARNED.md, session 15:
// lm_head 13.1 -> 22.3 GB/s per core in 2 MB pages). So the mapping is aligned to 2 MB and, from
// 2 MB up, advised MADV_HUGEPAGE before anything touches it: where transparent huge pages are
// `always` or `madvise` the first touch of each 2 MB range gets a huge page; where they are
// `never`, or the kernel refuses the advice, it is ordinary 4 KB memory and nothing else changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "shared/result.hpp"

namespace waste {

class AnonMemory {
 public:
  static constexpr std::uint64_t kHugePage = std::uint64_t{2} << 20;

  AnonMemory() = default;
  ~AnonMemory();
  AnonMemory(AnonMemory&& other) noexcept;
  AnonMemory& operator=(AnonMemory&& other) noexcept;
  AnonMemory(const AnonMemory&) = delete;
  AnonMemory& operator=(const AnonMemory&) = delete;

  // `bytes` of zero-filled memory (rounded up to 4 KB; to 2 MB from 2 MB up), MAP_PRIVATE,
  // read-write. `what` names the memory in the error ("trunk image", ...).
  static Result<AnonMemory> allocate(std::uint64_t bytes, const char* what);

  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(addr_); }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return {data(), std::size_t(size_)}; }
  // Whether madvise(MADV_HUGEPAGE) was accepted (false below 2 MB, or where THP is compiled out).
  [[nodiscard]] bool huge_page_advised() const noexcept { return advised_; }
  // Give up ownership: the caller munmaps (data(), size()) itself.
  std::byte* release() noexcept;

 private:
  void* addr_ = nullptr;
  std::uint64_t size_ = 0;
  bool advised_ = false;
};

}  // namespace waste
