// Pins decode's LUT mode (compute/forward/lut_mode.hpp) for one test's scope and restores the one
// before. For tests that hold the LUT path to the f32 tables' bits or to 1e-4 against an exact
// reference: where the CPU has a vector q16 apply (AVX-512 VBMI) q16 is the default, within the
// 2e-3 bound docs/QUALITY.md gives, not those tests' bound.
#pragma once

#include "compute/forward/lut_mode.hpp"

namespace waste::test {

class LutModeGuard {
 public:
  explicit LutModeGuard(forward::LutMode mode) { forward::set_lut_mode(mode, "a test's LutModeGuard"); }
  ~LutModeGuard() { forward::set_lut_mode(saved_, "a test's LutModeGuard (restored)"); }
  LutModeGuard(const LutModeGuard&) = delete;
  LutModeGuard& operator=(const LutModeGuard&) = delete;

 private:
  forward::LutMode saved_ = forward::lut_mode();
};

}  // namespace waste::test
