#include "compute/convert/expert_format.hpp"

#include "compute/convert/converter.hpp"

namespace waste::convert {

Result<ExpertFormat> parse_expert_format(std::string_view text, std::string_view what) {
  if (text == "auto") return ExpertFormat::automatic;
  if (text == "vq3r") return ExpertFormat::vq3r;
  if (text == "vq4p") return ExpertFormat::vq4p;
  if (text == "vq2r") return ExpertFormat::vq2r;
  return make_error(Errc::argument, std::string(what) + ": '" + std::string(text) +
                                        "' is not an expert format (auto, vq3r, vq4p or vq2r)");
}

std::string_view expert_format_name(ExpertFormat f) {
  switch (f) {
    case ExpertFormat::vq3r: return "VQ3R";
    case ExpertFormat::vq4p: return "VQ4P";
    case ExpertFormat::vq2r: return "VQ2R";
    case ExpertFormat::automatic: break;
  }
  return "auto";
}

ExpertFormat default_expert_format(const kernels::KernelTable& kernels) {
  return kernels.vq4p_from_registers ? ExpertFormat::vq4p : ExpertFormat::vq3r;
}

void apply_expert_format(ExpertFormat f, const kernels::KernelTable& kernels, ConvertOptions& o) {
  if (f == ExpertFormat::automatic) f = default_expert_format(kernels);
  switch (f) {
    case ExpertFormat::vq4p: o.stages = 4, o.entries = 64, o.index_bits = 6; return;
    case ExpertFormat::vq2r: o.stages = 2, o.entries = 256, o.index_bits = 8; return;
    case ExpertFormat::vq3r:
    case ExpertFormat::automatic: o.stages = 3, o.entries = 256, o.index_bits = 8; return;
  }
}

std::string expert_format_report(ExpertFormat requested, const kernels::KernelTable& kernels) {
  if (requested != ExpertFormat::automatic) return std::string(expert_format_name(requested)) + " experts";
  return std::string(expert_format_name(default_expert_format(kernels))) + " experts (default on " + kernels.isa + ")";
}

}  // namespace waste::convert
