#include "shared/ipc/shm_layout.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace waste::ipc {

namespace {
constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

ArenaLayout ArenaLayout::compute(std::uint64_t record_bytes, std::uint32_t n_slots,
                                 std::uint32_t max_clients) noexcept {
  ArenaLayout l;
  l.slots_offset = sizeof(ControlHeaderShm);
  l.clients_offset = align_up(l.slots_offset + sizeof(SlotShm) * n_slots, 64);
  l.rings_offset = align_up(l.clients_offset + sizeof(ClientShm) * max_clients, 64);
  l.arena_offset = align_up(l.rings_offset + sizeof(RingShm) * 2 * max_clients, kSlotAlign);
  l.slot_bytes = align_up(record_bytes, kSlotAlign);
  l.total_bytes = l.arena_offset + l.slot_bytes * n_slots;
  return l;
}

Result<ArenaView> ArenaView::attach(std::span<std::byte> mapping, const std::string& segment_name) {
  if (mapping.size() < sizeof(ControlHeaderShm)) {
    return make_error(Errc::ipc, "shared memory segment " + segment_name + " is too small (" +
                                     std::to_string(mapping.size()) + " bytes)");
  }
  ArenaView view(mapping.data());
  const ControlHeaderShm& h = view.header();
  if (h.magic != kArenaMagic) {
    return make_error(Errc::ipc, "shared memory segment " + segment_name + " is not a waste-ioserver arena");
  }
  if (h.layout_version != kLayoutVersion) {
    return make_error(Errc::ipc, "shared memory segment " + segment_name + " has layout version " +
                                     std::to_string(h.layout_version) + ", this build speaks " +
                                     std::to_string(kLayoutVersion));
  }
  if (h.header_bytes != sizeof(ControlHeaderShm) || h.total_bytes > mapping.size()) {
    return make_error(Errc::ipc, "shared memory segment " + segment_name + " is truncated or inconsistent");
  }
  return view;
}

void write_error_text(ClientShm& client, std::string_view text) noexcept {
  char buf[kErrorTextWords * 8] = {};
  const std::size_t n = std::min(text.size(), sizeof(buf) - 1);
  std::memcpy(buf, text.data(), n);
  for (int w = 0; w < kErrorTextWords; ++w) {
    std::uint64_t word = 0;
    std::memcpy(&word, buf + w * 8, 8);
    client.error_text[w].store(word, std::memory_order_relaxed);
  }
}

std::string read_error_text(const ClientShm& client) {
  char buf[kErrorTextWords * 8 + 1] = {};
  for (int w = 0; w < kErrorTextWords; ++w) {
    const std::uint64_t word = client.error_text[w].load(std::memory_order_relaxed);
    std::memcpy(buf + w * 8, &word, 8);
  }
  return std::string(buf);
}

std::uint64_t fnv1a64(std::string_view bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace waste::ipc
