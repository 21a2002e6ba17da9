#include "shared/ipc/shm_layout.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace waste::ipc {

namespace {
constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

ArenaLayout ArenaLayout::compute(std::uint64_t record_bytes, std::uint32_t n_slots, std::uint32_t max_clients,
                                 std::uint32_t n_identity_files, std::uint32_t n_engram_tables,
                                 std::uint32_t n_engram_pages) noexcept {
  ArenaLayout l;
  l.record_bytes = record_bytes;
  l.n_slots = n_slots;
  l.max_clients = max_clients;
  l.n_identity_files = n_identity_files;
  l.n_engram_tables = n_engram_tables;
  l.n_engram_pages = n_engram_pages;
  l.slots_offset = sizeof(ControlHeaderShm);
  l.clients_offset = align_up(l.slots_offset + sizeof(SlotShm) * n_slots, 64);
  l.identity_offset = align_up(l.clients_offset + sizeof(ClientShm) * max_clients, 64);
  l.engram_tables_offset = align_up(l.identity_offset + sizeof(FileIdentityShm) * n_identity_files, 64);
  l.arena_offset = align_up(l.engram_tables_offset + sizeof(EngramTableShm) * n_engram_tables, kSlotAlign);
  l.slot_bytes = align_up(record_bytes, kSlotAlign);
  l.engram_pages_offset = l.arena_offset + l.slot_bytes * n_slots;  // 4 KiB aligned: slot_bytes is
  l.total_bytes = l.engram_pages_offset + kEngramPageBytes * n_engram_pages;
  return l;
}

Result<ArenaView> ArenaView::attach(std::span<const std::byte> mapping, const std::string& segment_name) {
  if (mapping.size() < sizeof(ControlHeaderShm)) {
    return make_error(Errc::ipc, "shared memory segment " + segment_name + " is too small (" +
                                     std::to_string(mapping.size()) + " bytes)");
  }
  // Clients map the arena read-only; the view's non-const accessors are only ever used to load.
  auto* base = const_cast<std::byte*>(mapping.data());
  const auto& h = *reinterpret_cast<const ControlHeaderShm*>(base);
  if (std::atomic_ref<const std::uint64_t>(h.magic).load(std::memory_order_acquire) != kArenaMagic) {
    return make_error(Errc::ipc, "shared memory segment " + segment_name + " is not a waste-ioserver arena");
  }
  if (h.layout_version != kLayoutVersion) {
    return make_error(Errc::ipc, "shared memory segment " + segment_name + " has layout version " +
                                     std::to_string(h.layout_version) + ", this build speaks " +
                                     std::to_string(kLayoutVersion));
  }
  const ArenaLayout l = ArenaLayout::compute(h.record_bytes, h.n_slots, h.max_clients, h.n_identity_files,
                                             h.n_engram_tables, h.n_engram_pages);
  if (h.header_bytes != sizeof(ControlHeaderShm) || h.max_clients > std::uint32_t(kMaxClients) ||
      h.n_engram_tables > std::uint32_t(kMaxEngramTables) || h.engram_tables_offset != l.engram_tables_offset ||
      h.engram_pages_offset != l.engram_pages_offset ||
      h.slots_offset != l.slots_offset || h.clients_offset != l.clients_offset ||
      h.identity_offset != l.identity_offset || h.arena_offset != l.arena_offset || h.slot_bytes != l.slot_bytes ||
      h.total_bytes != l.total_bytes || l.total_bytes > mapping.size()) {
    return make_error(Errc::ipc, "shared memory segment " + segment_name + " is truncated or inconsistent");
  }
  return ArenaView(base, l);
}

Status check_ring_segment(std::span<const std::byte> mapping, const std::string& segment_name, int client_idx,
                          std::uint64_t generation) {
  if (mapping.size() < sizeof(RingSegmentShm)) {
    return make_error(Errc::ipc, "ring segment " + segment_name + " is too small (" + std::to_string(mapping.size()) +
                                     " bytes)");
  }
  const auto& h = *reinterpret_cast<const RingSegmentHeaderShm*>(mapping.data());
  if (h.magic != kRingsMagic || h.layout_version != kLayoutVersion) {
    return make_error(Errc::ipc, "shared memory segment " + segment_name + " is not a waste-ioserver ring segment of "
                                     "layout version " + std::to_string(kLayoutVersion));
  }
  if (h.client_idx != client_idx || h.generation != generation) {
    return make_error(Errc::ipc, "ring segment " + segment_name + " belongs to client " + std::to_string(h.client_idx) +
                                     " generation " + std::to_string(h.generation) + ", not to this lease (client " +
                                     std::to_string(client_idx) + " generation " + std::to_string(generation) + ")");
  }
  return ok();
}

Status check_wake_segment(std::span<const std::byte> mapping, const std::string& segment_name) {
  if (mapping.size() < sizeof(WakeShm)) {
    return make_error(Errc::ipc, "wake segment " + segment_name + " is too small");
  }
  const auto& w = *reinterpret_cast<const WakeShm*>(mapping.data());
  if (w.magic != kWakeMagic || w.layout_version != kLayoutVersion) {
    return make_error(Errc::ipc, "shared memory segment " + segment_name + " is not a waste-ioserver wake segment");
  }
  return ok();
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
