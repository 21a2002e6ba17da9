// Pins the int8 prompt (and decode) products (compute/forward/int8_mode.hpp) for one test's scope and
// restores what was in force before: a test that compares prompt bits with decode bits, or two
// expert paths within 1e-4, runs with f32 trunk products (an int8 rounding step can flip on a
// 1e-6 change of its input, which moves logits by ~1e-3).
#pragma once

#include "compute/forward/int8_mode.hpp"

namespace waste::test {

class Int8PrefillGuard {
 public:
  // Pins the decode rule too: off with the prompt rule, as it was when the prompt rule is on.
  explicit Int8PrefillGuard(bool on) {
    forward::set_int8_prefill(on);
    if (!on) forward::set_int8_decode(false);
  }
  // Both rules as given.
  Int8PrefillGuard(bool prompt, bool decode) {
    forward::set_int8_prefill(prompt);
    forward::set_int8_decode(decode);
  }
  ~Int8PrefillGuard() {
    forward::set_int8_prefill(saved_);
    forward::set_int8_decode(saved_decode_);
  }
  Int8PrefillGuard(const Int8PrefillGuard&) = delete;
  Int8PrefillGuard& operator=(const Int8PrefillGuard&) = delete;

 private:
  bool saved_ = forward::int8_prefill_enabled();
  bool saved_decode_ = forward::int8_decode_enabled();
};

}  // namespace waste::test
