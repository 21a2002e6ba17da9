// The dump tools' input: float arrays taken in order from one buffer (the oracle scripts write
// them after a small header), as f32 matrices or vectors. A take past the end sets ok = false and
// returns the buffer's start, so a tool checks `ok` (or `whole()`) once after taking everything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/kernels/kernels.hpp"

namespace waste::test {

struct FloatReader {
  const std::vector<float>& data;
  std::size_t at = 0;
  bool ok = true;

  const float* take(std::int64_t n) {
    if (n < 0 || at + std::size_t(n) > data.size()) {
      ok = false;
      return data.data();
    }
    const float* p = data.data() + at;
    at += std::size_t(n);
    return p;
  }
  // An F32 QuantMatrix over the next rows x cols floats (row-major), no copy.
  kernels::QuantMatrix matrix(std::int64_t rows, std::int64_t cols) {
    const float* p = take(rows * cols);
    return kernels::QuantMatrix{reinterpret_cast<const std::uint8_t*>(p), nullptr, rows, cols,
                                cols * std::int64_t(sizeof(float)), 128, 0};
  }
  std::vector<float> vec(std::int64_t n) {
    const float* p = take(n);
    return ok ? std::vector<float>(p, p + n) : std::vector<float>();
  }
  // Every float taken, none left over.
  [[nodiscard]] bool whole() const { return ok && at == data.size(); }
};

}  // namespace waste::test
