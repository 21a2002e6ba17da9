// waste synth: write a valid v0 container full of deterministic random weights.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "compute/prompt/chat_format.hpp"

#include "compute/engram/engram_synth.hpp"

#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "shared/synth/synth.hpp"

namespace waste::cli {
namespace {

struct SynthArgs {
  synth::SynthRequest request;
  std::string experts, trunk, out;
  std::string config_file;
  std::string chat_format;  // copied to the container's chat.json (checked first)
  std::uint64_t engram_rows = 0;  // DeepSeek-V4.1: cap on each Engram table's rows (0 = the config's)
  int engram_bits = 8;
};

int run_synth(const SynthArgs& args) {
  synth::SynthRequest request = args.request;
  request.config_file = args.config_file;
  if (!args.experts.empty()) request.experts = args.experts;
  if (!args.trunk.empty()) request.trunk = args.trunk;
  if (request.preset.empty() == request.config_file.empty()) {
    std::fprintf(stderr, "waste synth: give exactly one of --preset or --config\n");
    return 2;
  }
  if (!args.chat_format.empty()) {
    if (auto format = ChatFormat::load(args.chat_format); !format) {
      std::fprintf(stderr, "waste synth: %s\n", format.error().message.c_str());
      return 2;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto spec = synth::make_spec(request);
  if (!spec) {
    std::fprintf(stderr, "waste synth: %s\n", spec.error().message.c_str());
    return 2;
  }
  auto stats = synth::write_container(*spec, args.out);
  if (!stats) {
    std::fprintf(stderr, "waste synth: %s\n", stats.error().message.c_str());
    return 1;
  }
  // DeepSeek-V4.1's Engram files (compute/engram/engram_synth.hpp: the layout is compute/engram's).
  std::string engram_note;
  if (spec->skeleton.config.uses_engram()) {
    engram::SynthEngramRequest er;
    er.seed = request.seed;
    er.bits = args.engram_bits;
    er.max_rows = args.engram_rows;
    auto e = engram::write_synthetic_engram(spec->skeleton.config, args.out, er);
    if (!e) {
      std::fprintf(stderr, "waste synth: %s\n", e.error().message.c_str());
      return 1;
    }
    engram_note = ", " + std::to_string(e->tables.layout.layers.size()) + " Engram tables (" +
                  std::to_string(e->table_bytes / 1000000) + " MB, primes from " +
                  std::to_string(e->engram_vocab_size) + ")";
  }
  if (!args.chat_format.empty()) {
    std::error_code ec;
    std::filesystem::copy_file(args.chat_format, std::filesystem::path(args.out) / "chat.json",
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) {
      std::fprintf(stderr, "waste synth: %s: cannot copy to the container: %s\n", args.chat_format.c_str(),
                   ec.message().c_str());
      return 1;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: %d layers, %d trunk tensors (%.1f MB), %d expert banks (%.1f MB)%s, %.1f s\n",
              args.out.c_str(), spec->skeleton.config.n_layers, stats->n_tensors, stats->trunk_bytes / 1e6,
              stats->n_banks, stats->expert_bytes / 1e6, engram_note.c_str(), secs);
  return 0;
}

const CommandRegistration kRegistration{Command{
    "synth", "Write a synthetic v0 container with deterministic random weights",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<SynthArgs>();
      auto* preset = sub.add_option("--preset", args->request.preset,
                                    "Preset name (configs/presets/NAME.json): " + synth::preset_list())
                         ->type_name("NAME")
                         ->default_str("none");
      auto* config = sub.add_option("--config", args->config_file, "HF-style config.json (+ optional \"synth\" knobs)")
                         ->type_name("FILE")
                         ->default_str("none");
      preset->excludes(config);
      sub.add_option("--out", args->out, "Output container directory")->type_name("DIR")->required();
      sub.add_option("--layers", args->request.layers, "Keep only the first N layers (0 = all)")
          ->type_name("N")
          ->check(int_range("--layers", 0, 1024));
      sub.add_option("--seed", args->request.seed, "Generator seed (same seed, same bytes)")
          ->type_name("SEED")
          ->check(u64_value("--seed"));
      sub.add_option("--experts", args->experts, "Expert format")
          ->type_name("FORMAT")
          ->default_str("the preset's")
          ->check(one_of("--experts", std::vector<std::string>{"vq3r", "vq2r", "vq4p"}));
      sub.add_option("--trunk", args->trunk, "Trunk matrix format")
          ->type_name("FORMAT")
          ->default_str("the preset's")
          ->check(one_of("--trunk", std::vector<std::string>{"q4g", "q8g", "q3g"}));
      sub.add_flag("--tokenizer", args->request.tokenizer, "Also write tokenizer.model and specials.json");
      auto* vision = sub.add_flag("--vision", args->request.vision,
                                  "Also write the K3 vision tower (real shapes) and vision.json");
      sub.add_option("--vision-layers", args->request.vision_layers, "Tower blocks with --vision (the release has 27)")
          ->type_name("N")
          ->default_str("2")
          ->check(int_range("--vision-layers", 1, 27))
          ->needs(vision);
      sub.add_option("--engram-rows", args->engram_rows,
                     "DeepSeek-V4.1: at most N rows per Engram table (primes drawn to fit; 0 = the config's)")
          ->type_name("N")
          ->default_str("0")
          ->check(u64_value("--engram-rows"));
      sub.add_option("--engram-bits", args->engram_bits, "DeepSeek-V4.1: Engram table rows of 4 or 8 bits")
          ->type_name("4|8")
          ->default_str("8")
          ->check(int_range("--engram-bits", 4, 8));
      sub.add_option("--chat-format", args->chat_format, "Also write this chat.json (e.g. configs/chat/kimi-k3.json)")
          ->type_name("FILE")
          ->default_str("none");
      return [args] { return run_synth(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
