// waste convert SRC_DIR --out NAME.waste: a Hugging Face checkpoint (safetensors, bf16/fp16/f32,
// fp8 with block scales, MXFP4 experts) to a v0 container. Resumable: rerun the same command
// after a crash and finished layers are kept (docs/design/convert.md).
#include <chrono>
#include <cstdio>
#include <sstream>

#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "compute/convert/converter.hpp"
#include "compute/convert/expert_format.hpp"
#include "compute/kernels/kernels.hpp"
#include "shared/container/file_io.hpp"

namespace waste::cli {
namespace {

struct ConvertArgs {
  convert::ConvertOptions options;
  std::string src, out, layers, report, experts;
  bool quiet = false;
  bool format_flags = false;  // --stages, --entries or --index-bits given
};

// "1,3,5-7" -> {1,3,5,6,7}
std::optional<std::vector<int>> parse_layer_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto dash = item.find('-');
    try {
      std::size_t used = 0;
      if (dash == std::string::npos) {
        out.push_back(std::stoi(item, &used));
        if (used != item.size()) return std::nullopt;
      } else {
        const int a = std::stoi(item.substr(0, dash), &used);
        if (used != dash) return std::nullopt;
        const std::string rest = item.substr(dash + 1);
        const int b = std::stoi(rest, &used);
        if (used != rest.size() || b < a || b - a > 100000) return std::nullopt;
        for (int i = a; i <= b; ++i) out.push_back(i);
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (out.empty()) return std::nullopt;
  return out;
}

int run_convert(ConvertArgs& args) {
  auto& o = args.options;
  o.src = args.src;
  o.out = args.out;
  o.progress = convert::detect_progress_mode(args.quiet);
  // The expert format: --experts (auto when neither it nor the fine-grained flags are given), or
  // --stages/--entries/--index-bits on VQ3R's defaults. Not both.
  std::string format_words;
  if (!args.experts.empty() && args.format_flags) {
    std::fprintf(stderr, "waste convert: --experts and --stages/--entries/--index-bits: give one or the other\n");
    return 2;
  }
  if (!args.format_flags) {
    auto format = convert::parse_expert_format(args.experts.empty() ? "auto" : args.experts, "--experts");
    if (!format) {
      std::fprintf(stderr, "waste convert: %s\n", format.error().message.c_str());
      return 2;
    }
    convert::apply_expert_format(*format, kernels::active(), o);
    format_words = ", " + convert::expert_format_report(*format, kernels::active());
  }
  if (!args.layers.empty()) {
    auto list = parse_layer_list(args.layers);
    if (!list) {
      std::fprintf(stderr, "waste convert: --layers %s: expected a list like 1,3,5-7\n", args.layers.c_str());
      return 2;
    }
    o.layers = std::move(*list);
  }
  const auto start = std::chrono::steady_clock::now();
  auto summary = convert::convert_checkpoint(o);
  if (!summary) {
    std::fprintf(stderr, "waste convert: %s\n", summary.error().message.c_str());
    return summary.error().code == Errc::argument ? 2 : 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!args.report.empty()) {
    if (auto s = write_file_atomic(args.report, convert::format_report(*summary, o)); !s) {
      std::fprintf(stderr, "waste convert: %s\n", s.error().message.c_str());
      return 1;
    }
  }
  if (!args.quiet) {
    for (std::size_t b = 0, e; b < summary->note.size(); b = e + 1) {  // one line per note
      e = summary->note.find('\n', b);
      if (e == std::string::npos) e = summary->note.size();
      std::fprintf(stderr, "waste convert: %s\n", summary->note.substr(b, e - b).c_str());
    }
  }
  if (!summary->complete) {
    std::string rest;
    for (int l : summary->remaining) rest += (rest.empty() ? "" : ",") + std::to_string(l);
    if (!args.quiet) std::printf("%s: not complete yet; MoE layers still to encode: %s\n", args.out.c_str(), rest.c_str());
    return 0;
  }
  if (!args.quiet) {
    std::printf("wrote %s: %zu MoE layers%s, %.1f MB in, %.1f MB out, %.1f s (read %.1f, k-means %.1f, encode %.1f, write %.1f, trunk %.1f)\n",
                args.out.c_str(), summary->layers.size(), format_words.c_str(), summary->bytes_in / 1e6,
                summary->bytes_out / 1e6, secs,
                summary->seconds_read, summary->seconds_kmeans, summary->seconds_encode, summary->seconds_write,
                summary->seconds_trunk);
  }
  return 0;
}

const CommandRegistration kRegistration{Command{
    "convert", "Convert a Hugging Face checkpoint directory to a v0 container (resumable)",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<ConvertArgs>();
      sub.add_option("SRC_DIR", args->src, "Checkpoint directory (config.json, *.safetensors)")
          ->type_name("DIR")
          ->required();
      sub.add_option("--out", args->out, "Output container directory (NAME.waste)")->type_name("DIR")->required();
      sub.add_option("--experts", args->experts,
                     "Expert format: auto (VQ4P where this CPU looks VQ4P up from registers, AVX2 and AVX-512; VQ3R "
                     "elsewhere), vq3r, vq4p or vq2r; every one runs on every CPU")
          ->type_name("FORMAT")
          ->default_str("auto");
      const auto flag = [args](const std::string&) { args->format_flags = true; };
      sub.add_option("--stages", args->options.stages, "RVQ stages (instead of --experts)")
          ->type_name("N")
          ->check(one_of("--stages", std::vector<int>{2, 3, 4}))
          ->each(flag);
      sub.add_option("--entries", args->options.entries, "Codebook entries per stage (instead of --experts)")
          ->type_name("N")
          ->check(int_range("--entries", 8, 256))
          ->each(flag);
      sub.add_option("--index-bits", args->options.index_bits,
                     "Bits per codebook index: 8, or 6 with --stages 4 --entries 64 (VQ4P; instead of --experts)")
          ->type_name("BITS")
          ->check(one_of("--index-bits", std::vector<int>{6, 8}))
          ->each(flag);
      sub.add_option("--trunk-bits", args->options.trunk_bits, "Trunk matrices: 4 (Q4G) or 8 (Q8G) bits per weight")
          ->type_name("BITS")
          ->check(one_of("--trunk-bits", std::vector<int>{4, 8}));
      sub.add_option("--engram-bits", args->options.engram_bits,
                     "DeepSeek-V4.1 Engram tables (engram-L{n}.bin): 4 or 8 bits per value")
          ->type_name("BITS")
          ->check(one_of("--engram-bits", std::vector<int>{4, 8}));
      sub.add_option("--jobs", args->options.jobs, "Threads (0 = all; the bytes do not depend on it)")
          ->type_name("N")
          ->check(int_range("--jobs", 0, 64));
      sub.add_option("--layers", args->layers, "Encode only these MoE layers in this run, e.g. 1,3,5-7")
          ->type_name("LIST")
          ->default_str("all");
      sub.add_option("--report", args->report, "Write the relative weight error per layer and kind (JSON)")
          ->type_name("FILE")
          ->default_str("none");
      sub.add_flag("--quiet", args->quiet, "No progress and no summary");
      return [args] { return run_convert(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
