#include "cli/serve/prefix_cache.hpp"

#include <algorithm>
#include <bit>
#include <random>

namespace waste::serve {
namespace {

struct SipState {
  std::uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  }
  void absorb(std::uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

std::uint64_t load_le(const std::uint8_t* p, std::size_t n) {
  std::uint64_t m = 0;
  for (std::size_t i = 0; i < n; ++i) m |= std::uint64_t(p[i]) << (8 * i);
  return m;
}

// splitmix64's finaliser: a bijection that spreads every input bit.
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::uint64_t siphash24(std::span<const std::uint8_t> bytes, std::uint64_t k0, std::uint64_t k1) {
  SipState s{k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL, k0 ^ 0x6c7967656e657261ULL,
             k1 ^ 0x7465646279746573ULL};
  const std::size_t whole = bytes.size() / 8 * 8;
  for (std::size_t i = 0; i < whole; i += 8) s.absorb(load_le(bytes.data() + i, 8));
  s.absorb((std::uint64_t(bytes.size() & 0xff) << 56) | load_le(bytes.data() + whole, bytes.size() - whole));
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

std::uint64_t image_digest(std::span<const std::uint8_t> bytes) {
  static const std::array<std::uint64_t, 2> key = [] {
    std::random_device device;
    std::array<std::uint64_t, 2> k{};
    for (auto& half : k) half = (std::uint64_t(device()) << 32) ^ std::uint64_t(device());
    return k;
  }();
  return siphash24(bytes, key[0], key[1]);
}

std::uint64_t media_key(std::uint64_t digest, std::size_t offset) {
  return (std::uint64_t(1) << 63) | (mix(digest ^ mix(std::uint64_t(offset) + 1)) >> 1);
}

std::shared_ptr<const PrefixSnapshot> PrefixCache::find(std::span<const std::uint64_t> key, std::size_t max_length) {
  auto best = lru_.end();
  std::size_t best_length = 0;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    const PrefixKey& held = (*it)->key;
    if (held.size() <= best_length || held.size() > max_length || held.size() > key.size()) continue;
    if (std::equal(held.begin(), held.end(), key.begin())) {
      best = it;
      best_length = held.size();
    }
  }
  if (best == lru_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, best);
  return lru_.front();
}

std::list<PrefixCache::Entry>::iterator PrefixCache::locate(std::span<const std::uint64_t> key) {
  return std::find_if(lru_.begin(), lru_.end(), [&](const Entry& e) {
    return e->key.size() == key.size() && std::equal(e->key.begin(), e->key.end(), key.begin());
  });
}

bool PrefixCache::touch(std::span<const std::uint64_t> key) {
  const auto it = locate(key);
  if (it == lru_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it);
  return true;
}

bool PrefixCache::insert(PrefixSnapshot snapshot) {
  const std::uint64_t size = snapshot.bytes();
  if (snapshot.key.empty() || size > capacity_) return false;
  if (const auto same = locate(snapshot.key); same != lru_.end()) {
    bytes_ -= (*same)->bytes();
    lru_.erase(same);
  }
  while (bytes_ + size > capacity_) {
    bytes_ -= lru_.back()->bytes();
    lru_.pop_back();
    ++evictions_;
  }
  lru_.push_front(std::make_shared<const PrefixSnapshot>(std::move(snapshot)));
  bytes_ += size;
  return true;
}

}  // namespace waste::serve
