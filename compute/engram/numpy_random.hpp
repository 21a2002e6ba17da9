// numpy's default random generator, reproduced bit for bit for the one use the Engram layout
// makes of it (model-families.md §2.1): `np.random.default_rng(seed).integers(0, high, size,
// dtype=np.int64)`. Conversion-time only: the values are frozen into engram.json as exact
// integers and never drawn at run time.
//
//   * SeedSequence(seed): the entropy integer as little-endian 32-bit words, mixed into a pool
//     of four words by its hash; generate_state(n) hashes the pool cyclically into n words.
//   * PCG64 (numpy's, XSL-RR output over a 128-bit LCG): seeded from four 64-bit words of that
//     state (the first two the initial state, the last two the stream), stepped before each
//     output. A 32-bit draw is the low half of a 64-bit output, and the high half is kept for
//     the next 32-bit draw.
//   * integers(low, high) over int64, high exclusive: Lemire's multiply-and-reject bounded draw,
//     over 32-bit outputs when high - low - 1 fits in 32 bits, else over 64-bit ones.
#pragma once

#include <cstdint>
#include <vector>

namespace waste::engram {

// numpy.random.SeedSequence(entropy) without spawn keys or a pool size other than 4.
class SeedSequence {
 public:
  explicit SeedSequence(std::uint64_t entropy);
  // generate_state(n_words, np.uint32).
  std::vector<std::uint32_t> generate_state(std::size_t n_words) const;
  // generate_state(n_words, np.uint64): pairs of 32-bit words, low word first.
  std::vector<std::uint64_t> generate_state64(std::size_t n_words) const;

 private:
  std::uint32_t pool_[4] = {};
};

// numpy.random.PCG64 seeded from a SeedSequence.
class Pcg64 {
 public:
  explicit Pcg64(const SeedSequence& seed);
  std::uint64_t next64();
  std::uint32_t next32();

 private:
  void step();
  unsigned __int128 state_ = 0;
  unsigned __int128 increment_ = 0;
  bool has_half_ = false;
  std::uint32_t half_ = 0;
};

// Generator(PCG64(SeedSequence(seed))).integers(low, high, size=n, dtype=np.int64), high
// exclusive; needs low < high.
std::vector<std::int64_t> numpy_integers_int64(std::uint64_t seed, std::int64_t low, std::int64_t high, std::size_t n);

}  // namespace waste::engram
