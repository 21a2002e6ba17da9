// The converter's expert format, decided in one place (issue 26): `waste convert --experts
// auto|vq3r|vq4p|vq2r`. Both 3-bit formats cost about the same quality on kjv-mini (VQ3R +0.45%
// Revelation perplexity, VQ4P +0.49%; docs/QUALITY.md); which one decodes faster depends on the
// CPU: VQ4P's 64-entry stage tables sit in registers on AVX-512 (several times VQ3R's rate there),
// while without AVX-512 they are gathered and VQ3R is faster (docs/PERFORMANCE.md). So `auto`, the
// default, takes VQ4P where the kernel table looks VQ4P up from registers and VQ3R elsewhere.
// Either container runs on every CPU and in the public engine (v0 fmt 4 and 8).
#pragma once

#include <string>
#include <string_view>

#include "compute/kernels/kernels.hpp"
#include "shared/result.hpp"

namespace waste::convert {

struct ConvertOptions;

enum class ExpertFormat { automatic, vq3r, vq4p, vq2r };

// "auto", "vq3r", "vq4p", "vq2r"; anything else an Errc::argument naming `what` and the text.
Result<ExpertFormat> parse_expert_format(std::string_view text, std::string_view what);
std::string_view expert_format_name(ExpertFormat f);  // "auto", "VQ3R", "VQ4P", "VQ2R"
// What `auto` means on a CPU whose kernel table is `kernels`: vq4p or vq3r.
ExpertFormat default_expert_format(const kernels::KernelTable& kernels);
// Sets o.stages, o.entries and o.index_bits for a format (auto resolved with `kernels`).
void apply_expert_format(ExpertFormat f, const kernels::KernelTable& kernels, ConvertOptions& o);
// The summary's words for the choice: "VQ4P experts (default on avx512vbmi)", "VQ3R experts".
std::string expert_format_report(ExpertFormat requested, const kernels::KernelTable& kernels);

}  // namespace waste::convert
