// Which lm_head a decode step's logits come from (issue 26). Every v0 container stores lm_head as
// Q8G (waste-v0-reference.md §1.4); under the decode rule (int8_mode.hpp) a decode row takes the
// int8 product against it, and a one-token step then reads its 8.125 bits a weight at memory speed:
// the largest single read of a Kimi-Linear step (383 MB of ~600). Three choices:
// - q8: the stored Q8G matrix (the decode rule's bits).
// - q6 (the default): a copy made at open in the run-time Q6P layout (kernels/int8_matmul.hpp),
//   6.125 bits a weight: each group of 128 dequantised, then quantised to 6 bits by the converter's
//   rule (compute/model/decode_head.hpp). About as many bits as llama.cpp's Q4_K_M gives its output
//   matrix (Q6_K).
// - q4: a Q4G copy the same way (the converter's own Q4G rule), 4.125 bits a weight.
// A copy is not q8's bits: each weight moves by at most half its group's step, so output r moves by
// at most sum_c |x_c| * step_{r,g(c)} / 2 beyond the int8 product's own bound; the measured cost
// (kjv-mini perplexity, top-1 agreement against q8) and speed are in docs/QUALITY.md and
// docs/PERFORMANCE.md. Prompt rows keep the stored matrix and the f32 product under any choice, and a
// copy is made only where the decode rule is on (model::decode_head_copy), so with
// WASTE_DECODE_INT8=off (its default without AVX-512 VNNI) nothing changes.
// Selection, once per process: WASTE_DECODE_HEAD=q8|q6|q4 when set, else default_head_mode();
// set_head_mode() (tests, `waste bench --decode-head`) overrides it for engines opened afterwards.
#pragma once

#include <string>
#include <string_view>

#include "shared/result.hpp"

namespace waste::forward {

enum class HeadMode { q8, q6, q4 };

HeadMode head_mode();
// Overrides the mode for the rest of the process; `by` (a string literal: "--decode-head", a test's
// name) is what head_mode_report() names as the source.
void set_head_mode(HeadMode mode, const char* by = "set_head_mode");
// "q8", "q6" or "q4"; anything else an error naming `what` and the value.
Result<HeadMode> parse_head_mode(std::string_view text, std::string_view what);
std::string_view head_mode_name(HeadMode mode);
// The mode when WASTE_DECODE_HEAD is unset.
HeadMode default_head_mode();
// The start-up choice: `env` (WASTE_DECODE_HEAD's value; nullptr or "" when unset) parsed when
// given, else default_head_mode(). A bad value is parse_head_mode's error naming WASTE_DECODE_HEAD.
Result<HeadMode> resolve_head_mode(const char* env);
// The mode and where it came from, for `waste bench` and `waste version`: "q6 (default)",
// "q8 (WASTE_DECODE_HEAD)", "q4 (--decode-head)", or "q8 (decode int8 off: no copy)".
std::string head_mode_report();

}  // namespace waste::forward
