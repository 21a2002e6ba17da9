#include "compute/engram/numpy_random.hpp"

namespace waste::engram {
namespace {

// SeedSequence's hash constants (numpy/random/bit_generator.pyx).
constexpr std::uint32_t kInitA = 0x43b0d7e5u;
constexpr std::uint32_t kMultA = 0x931e8875u;
constexpr std::uint32_t kInitB = 0x8b51f9ddu;
constexpr std::uint32_t kMultB = 0x58f38dedu;
constexpr std::uint32_t kMixMultL = 0xca01f9ddu;
constexpr std::uint32_t kMixMultR = 0x4973f715u;
constexpr unsigned kXShift = 16;  // half of the 32-bit word

// PCG's default 128-bit LCG multiplier.
constexpr unsigned __int128 kPcgMultiplier =
    (static_cast<unsigned __int128>(0x2360ED051FC65DA4ull) << 64) | 0x4385DF649FCCF645ull;

class HashMix {
 public:
  explicit HashMix(std::uint32_t init) : constant_(init) {}
  std::uint32_t operator()(std::uint32_t value) {
    value ^= constant_;
    constant_ *= kMultA;
    value *= constant_;
    value ^= value >> kXShift;
    return value;
  }

 private:
  std::uint32_t constant_;
};

std::uint32_t mix(std::uint32_t x, std::uint32_t y) {
  std::uint32_t r = kMixMultL * x - kMixMultR * y;
  r ^= r >> kXShift;
  return r;
}

}  // namespace

SeedSequence::SeedSequence(std::uint64_t entropy) {
  // An integer's 32-bit words, least significant first; zero is one word.
  std::vector<std::uint32_t> words;
  do {
    words.push_back(static_cast<std::uint32_t>(entropy & 0xFFFFFFFFu));
    entropy >>= 32;
  } while (entropy != 0);
  HashMix hash(kInitA);
  for (std::size_t i = 0; i < 4; ++i) pool_[i] = hash(i < words.size() ? words[i] : 0u);
  for (std::size_t src = 0; src < 4; ++src) {
    for (std::size_t dst = 0; dst < 4; ++dst) {
      if (src != dst) pool_[dst] = mix(pool_[dst], hash(pool_[src]));
    }
  }
  for (std::size_t src = 4; src < words.size(); ++src) {
    for (std::size_t dst = 0; dst < 4; ++dst) pool_[dst] = mix(pool_[dst], hash(words[src]));
  }
}

std::vector<std::uint32_t> SeedSequence::generate_state(std::size_t n_words) const {
  std::vector<std::uint32_t> out(n_words);
  std::uint32_t constant = kInitB;
  for (std::size_t i = 0; i < n_words; ++i) {
    std::uint32_t v = pool_[i % 4];
    v ^= constant;
    constant *= kMultB;
    v *= constant;
    v ^= v >> kXShift;
    out[i] = v;
  }
  return out;
}

std::vector<std::uint64_t> SeedSequence::generate_state64(std::size_t n_words) const {
  const auto words = generate_state(2 * n_words);
  std::vector<std::uint64_t> out(n_words);
  for (std::size_t i = 0; i < n_words; ++i) {
    out[i] = static_cast<std::uint64_t>(words[2 * i]) | (static_cast<std::uint64_t>(words[2 * i + 1]) << 32);
  }
  return out;
}

Pcg64::Pcg64(const SeedSequence& seed) {
  const auto words = seed.generate_state64(4);
  const unsigned __int128 initial = (static_cast<unsigned __int128>(words[0]) << 64) | words[1];
  const unsigned __int128 stream = (static_cast<unsigned __int128>(words[2]) << 64) | words[3];
  increment_ = (stream << 1) | 1u;
  state_ = 0;
  step();
  state_ += initial;
  step();
}

void Pcg64::step() { state_ = state_ * kPcgMultiplier + increment_; }

std::uint64_t Pcg64::next64() {
  step();
  const auto high = static_cast<std::uint64_t>(state_ >> 64);
  const auto low = static_cast<std::uint64_t>(state_);
  const std::uint64_t x = high ^ low;
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  return (x >> rot) | (x << ((64u - rot) & 63u));
}

std::uint32_t Pcg64::next32() {
  if (has_half_) {
    has_half_ = false;
    return half_;
  }
  const std::uint64_t v = next64();
  has_half_ = true;
  half_ = static_cast<std::uint32_t>(v >> 32);
  return static_cast<std::uint32_t>(v);
}

std::vector<std::int64_t> numpy_integers_int64(std::uint64_t seed, std::int64_t low, std::int64_t high, std::size_t n) {
  Pcg64 gen{SeedSequence(seed)};
  // The inclusive span high - 1 - low, in unsigned arithmetic as numpy computes it.
  const std::uint64_t span = static_cast<std::uint64_t>(high) - 1u - static_cast<std::uint64_t>(low);
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t v = 0;
    if (span == 0) {
      v = 0;
    } else if (span <= 0xFFFFFFFFull) {
      const auto span32 = static_cast<std::uint32_t>(span);
      if (span32 == 0xFFFFFFFFu) {
        v = gen.next32();
      } else {
        const std::uint32_t range = span32 + 1u;
        std::uint64_t m = static_cast<std::uint64_t>(gen.next32()) * range;
        auto leftover = static_cast<std::uint32_t>(m);
        if (leftover < range) {
          const std::uint32_t threshold = (0xFFFFFFFFu - span32) % range;
          while (leftover < threshold) {
            m = static_cast<std::uint64_t>(gen.next32()) * range;
            leftover = static_cast<std::uint32_t>(m);
          }
        }
        v = m >> 32;
      }
    } else if (span == ~0ull) {
      v = gen.next64();
    } else {
      const std::uint64_t range = span + 1u;
      unsigned __int128 m = static_cast<unsigned __int128>(gen.next64()) * range;
      auto leftover = static_cast<std::uint64_t>(m);
      if (leftover < range) {
        const std::uint64_t threshold = (~0ull - span) % range;
        while (leftover < threshold) {
          m = static_cast<unsigned __int128>(gen.next64()) * range;
          leftover = static_cast<std::uint64_t>(m);
        }
      }
      v = static_cast<std::uint64_t>(m >> 64);
    }
    out[i] = static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + v);
  }
  return out;
}

}  // namespace waste::engram
