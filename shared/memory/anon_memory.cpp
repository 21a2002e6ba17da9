#include "shared/memory/anon_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace waste {

AnonMemory::~AnonMemory() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

AnonMemory::AnonMemory(AnonMemory&& other) noexcept
    : addr_(std::exchange(other.addr_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      advised_(std::exchange(other.advised_, false)) {}

AnonMemory& AnonMemory::operator=(AnonMemory&& other) noexcept {
  if (this != &other) {
    if (addr_ != nullptr) ::munmap(addr_, size_);
    addr_ = std::exchange(other.addr_, nullptr);
    size_ = std::exchange(other.size_, 0);
    advised_ = std::exchange(other.advised_, false);
  }
  return *this;
}

std::byte* AnonMemory::release() noexcept {
  size_ = 0;
  advised_ = false;
  return static_cast<std::byte*>(std::exchange(addr_, nullptr));
}

Result<AnonMemory> AnonMemory::allocate(std::uint64_t bytes, const char* what) {
  const bool huge = bytes >= kHugePage;
  const std::uint64_t unit = huge ? kHugePage : 4096;
  const std::uint64_t size = (std::max<std::uint64_t>(bytes, 1) + unit - 1) / unit * unit;
  // Over-map by one huge page, then unmap the head and tail so the kept range starts on 2 MB.
  const std::uint64_t mapped = huge ? size + kHugePage : size;
  void* raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return make_error(Errc::io, std::string(what) + " (" + std::to_string(size) + " bytes): mmap: " + std::strerror(errno));
  }
  auto* base = static_cast<std::byte*>(raw);
  if (huge) {
    const auto addr = reinterpret_cast<std::uintptr_t>(base);
    const std::uint64_t head = (kHugePage - addr % kHugePage) % kHugePage;
    if (head > 0) ::munmap(base, head);
    const std::uint64_t tail = mapped - head - size;
    if (tail > 0) ::munmap(base + head + size, tail);
    base += head;
  }
  AnonMemory m;
  m.addr_ = base;
  m.size_ = size;
  m.advised_ = huge && ::madvise(base, size, MADV_HUGEPAGE) == 0;
  return m;
}

}  // namespace waste
