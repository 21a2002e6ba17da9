// Pins the int8 prompt products (compute/forward/int8_mode.hpp) on or off for one test's scope and
// restores what was in force before: a test that compares prompt bits with decode bits, or two
// expert paths within 1e-4, runs with f32 trunk products (an int8 rounding step can flip on a
// 1e-6 change of its input, which moves logits by ~1e-3).
#pragma once

#include "compute/forward/int8_mode.hpp"

namespace waste::test {

class Int8PrefillGuard {
 public:
  explicit Int8PrefillGuard(bool on) { forward::set_int8_prefill(on); }
  ~Int8PrefillGuard() { forward::set_int8_prefill(saved_); }
  Int8PrefillGuard(const Int8PrefillGuard&) = delete;
  Int8PrefillGuard& operator=(const Int8PrefillGuard&) = delete;

 private:
  bool saved_ = forward::int8_prefill_enabled();
};

}  // namespace waste::test
