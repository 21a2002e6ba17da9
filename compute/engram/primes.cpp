#include "compute/engram/primes.hpp"

#include <set>
#include <string>

namespace waste::engram {
namespace {

std::uint64_t mul_mod(std::uint64_t a, std::uint64_t b, std::uint64_t m) {
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}

std::uint64_t pow_mod(std::uint64_t base, std::uint64_t exp, std::uint64_t m) {
  std::uint64_t result = 1 % m;
  base %= m;
  while (exp > 0) {
    if (exp & 1u) result = mul_mod(result, base, m);
    base = mul_mod(base, base, m);
    exp >>= 1;
  }
  return result;
}

}  // namespace

bool is_prime(std::uint64_t n) noexcept {
  static constexpr std::uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return false;
  for (const std::uint64_t p : kBases) {
    if (n % p == 0) return n == p;
  }
  // n - 1 = d * 2^s with d odd.
  std::uint64_t d = n - 1;
  int s = 0;
  while ((d & 1u) == 0) {
    d >>= 1;
    ++s;
  }
  for (const std::uint64_t a : kBases) {
    std::uint64_t x = pow_mod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s; ++r) {
      x = mul_mod(x, x, n);
      if (x == n - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

Result<std::vector<std::vector<std::vector<std::uint64_t>>>> draw_bucket_primes(int n_layers, int max_ngram_size,
                                                                               int n_heads,
                                                                               std::uint64_t engram_vocab_size) {
  if (n_layers < 0) return make_error(Errc::argument, "engram layers: " + std::to_string(n_layers) + " is negative");
  if (max_ngram_size < 2) {
    return make_error(Errc::argument, "engram max_ngram_size " + std::to_string(max_ngram_size) + " is below 2");
  }
  if (n_heads < 1) return make_error(Errc::argument, "engram n_heads " + std::to_string(n_heads) + " is below 1");
  if (engram_vocab_size < 1) return make_error(Errc::argument, "engram_vocab_size is 0");
  constexpr std::uint64_t kLimit = std::uint64_t{1} << 62;
  std::set<std::uint64_t> taken;
  std::vector<std::vector<std::vector<std::uint64_t>>> primes(static_cast<std::size_t>(n_layers));
  for (auto& layer : primes) {
    layer.resize(static_cast<std::size_t>(max_ngram_size - 1));
    for (auto& per_ngram : layer) {
      std::uint64_t current = engram_vocab_size - 1;
      for (int h = 0; h < n_heads; ++h) {
        std::uint64_t candidate = current + 1;
        while (!is_prime(candidate) || taken.contains(candidate)) {
          if (candidate >= kLimit) {
            return make_error(Errc::argument, "engram bucket primes above engram_vocab_size " +
                                                  std::to_string(engram_vocab_size) + " leave 62 bits");
          }
          ++candidate;
        }
        taken.insert(candidate);
        per_ngram.push_back(candidate);
        current = candidate;
      }
    }
  }
  return primes;
}

}  // namespace waste::engram
