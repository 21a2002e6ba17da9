// The prefix cache of `waste serve` (`--prefix-cache SIZE`): copies in RAM of sequence states
// (the session bytes of compute/session: KDA S and conv rings, MLA latents up to the position,
// the AttnRes history, the residual stream), each keyed by the positions that made it, in a pool
// bounded by bytes that drops the least recently used first. A new request resumes from the
// longest held key that is a prefix of its own (docs/design/serve.md, Prefix cache).
//
// A key holds one 64-bit value per position: a token id as it is, or for a media position (an
// image's <|media_pad|>) a value with the top bit set, made from a keyed digest of the image's
// bytes and the offset in its block, so the same pad ids of two different images never match.
// Used by the scheduler's engine thread only: not thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <vector>

namespace waste::serve {

using PrefixKey = std::vector<std::uint64_t>;

// SipHash-2-4 of `bytes` under a 128-bit key (little-endian halves k0, k1).
std::uint64_t siphash24(std::span<const std::uint8_t> bytes, std::uint64_t k0, std::uint64_t k1);
// An image's digest: SipHash-2-4 under a key drawn at random once per process, so nobody can
// make two images collide on purpose.
std::uint64_t image_digest(std::span<const std::uint8_t> bytes);

// One key position.
[[nodiscard]] inline std::uint64_t token_key(int id) { return std::uint64_t(std::uint32_t(id)); }
std::uint64_t media_key(std::uint64_t digest, std::size_t offset);

struct PrefixSnapshot {
  PrefixKey key;                  // what was fed; key.size() is the state's position
  std::vector<std::byte> state;   // session::encode() of the state
  // What it counts against the pool: the state and the key.
  [[nodiscard]] std::uint64_t bytes() const {
    return std::uint64_t(state.size()) + std::uint64_t(key.size()) * sizeof(std::uint64_t);
  }
};

class PrefixCache {
 public:
  explicit PrefixCache(std::uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The held snapshot with the longest key that is a prefix of `key` and no longer than
  // `max_length` (a request keeps at least its last token to feed); null when none. A hit
  // becomes the most recently used.
  std::shared_ptr<const PrefixSnapshot> find(std::span<const std::uint64_t> key, std::size_t max_length);
  // True (and now the most recently used) when a snapshot of exactly `key` is held.
  bool touch(std::span<const std::uint64_t> key);
  // Holds `snapshot` as the most recently used, dropping the least recently used ones until the
  // pool fits its capacity; one of an equal key is replaced. False, with nothing dropped, when
  // the snapshot alone is larger than the capacity (or it is empty).
  bool insert(PrefixSnapshot snapshot);

  [[nodiscard]] std::uint64_t capacity() const { return capacity_; }
  [[nodiscard]] std::uint64_t bytes() const { return bytes_; }
  [[nodiscard]] std::size_t entries() const { return lru_.size(); }
  [[nodiscard]] std::uint64_t evictions() const { return evictions_; }

 private:
  using Entry = std::shared_ptr<const PrefixSnapshot>;
  std::list<Entry>::iterator locate(std::span<const std::uint64_t> key);
  std::list<Entry> lru_;  // front: most recently used
  std::uint64_t capacity_;
  std::uint64_t bytes_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace waste::serve
