// How the LUT path looks up experts with 8-bit indices (VQ3R, VQ2R; issue 26). Per token and
// layer the driver builds f32 tables of x's dot products with every codebook entry (rvq_driver);
// a row of W x is then a sum of looked-up entries. Two ways to look them up:
// - f32: the f32 tables, summed in the v0 order (gathers on x86). Exact to the reference's
//   summation.
// - q16: each vector position's tables turned into int16 in place (KernelTable::rvq_lut_to_q16:
//   one scale per position, the stage maxima summed to 32000), then looked up from registers
//   (AVX-512 VBMI: four vpermt2w per 32 rows and stage) and summed as integers. Not the f32
//   path's bits: each entry is off by at most half a step (scale / 2), so a row's sum moves by at
//   most stages * n_vectors * scale / 2 times its row scale. The measured cost is in
//   docs/QUALITY.md, the speed in docs/PERFORMANCE.md. Every ISA computes the same bits (generic
//   is the reference), but only the VBMI table has a vector apply; the others run generic's.
// Selection, once per process: WASTE_LUT=f32|q16 when set, else the CPU's default: q16 when the
// active kernel table has a vector q16 apply (kernels::has_vector_q16_apply: AVX-512 VBMI), f32
// when it does not (there q16 would be the scalar loop: slower, and off the f32 bits for nothing).
// set_lut_mode() (tests, `waste bench --lut`) overrides it for the rest of the process.
// VQ4P (packed 6-bit indices) has its own int8 tables and ignores this.
#pragma once

#include <string>
#include <string_view>

#include "compute/kernels/kernels.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/result.hpp"

namespace waste::forward {

enum class LutMode { f32, q16 };

LutMode lut_mode();
// Overrides the mode for the rest of the process; `by` (a string literal: "--lut", a test's
// name) is what lut_mode_report() names as the source.
void set_lut_mode(LutMode mode, const char* by = "set_lut_mode");
// "f32" or "q16"; anything else an error naming `what` and the value.
Result<LutMode> parse_lut_mode(std::string_view text, std::string_view what);
std::string_view lut_mode_name(LutMode mode);

// The mode a process on `kernels` starts in when WASTE_LUT is unset: q16 exactly when
// kernels::has_vector_q16_apply(kernels), else f32.
LutMode default_lut_mode(const kernels::KernelTable& kernels);
// The start-up choice: `env` (WASTE_LUT's value; nullptr or "" when unset) parsed when given,
// else default_lut_mode(kernels). A bad value is parse_lut_mode's error naming WASTE_LUT (the
// process then warns and keeps the default).
Result<LutMode> resolve_lut_mode(const char* env, const kernels::KernelTable& kernels);
// The current mode and where it came from, for `waste bench` and `waste version`:
// "q16 (default on avx512vbmi)", "f32 (default on avx2: no vector q16 apply)", "q16 (WASTE_LUT)",
// "f32 (--lut)".
std::string lut_mode_report();

// Whether experts of geometry g are looked up from int16 tables.
inline bool lut_q16(const ExpertGeometry& g) {
  return lut_mode() == LutMode::q16 && !g.packed6 && g.stages * g.lut_entries <= kernels::kLutQ16MaxSlot &&
         (g.stages * g.lut_entries) % 2 == 0;
}

}  // namespace waste::forward
