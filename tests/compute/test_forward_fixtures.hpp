// Synthetic containers for the forward-pass and engine tests: the `waste synth` library
// (shared/synth) writes each preset once per test process into a temporary directory
// (removed at exit).
#pragma once

#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>

#include <catch2/catch.hpp>

#include "shared/synth/synth.hpp"

namespace waste::test {

class SynthDirs {
 public:
  ~SynthDirs() {
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }
  // The container for `preset`, synthesised on first use; empty path (and a FAIL) on error.
  std::filesystem::path get(const std::string& preset) {
    if (auto it = dirs_.find(preset); it != dirs_.end()) return it->second;
    if (root_.empty()) {
      std::string templ = (std::filesystem::temp_directory_path() / "waste-forward-XXXXXX").string();
      if (mkdtemp(templ.data()) == nullptr) return {};
      root_ = templ;
    }
    const std::filesystem::path out = root_ / preset;
    synth::SynthRequest request;
    request.preset = preset;
    auto spec = synth::make_spec(request);
    if (!spec) {
      error_ = spec.error().message;
      return {};
    }
    if (auto written = synth::write_container(*spec, out); !written) {
      error_ = written.error().message;
      return {};
    }
    dirs_[preset] = out;
    return out;
  }

 private:
  std::filesystem::path root_;
  std::map<std::string, std::filesystem::path> dirs_;

 public:
  std::string error_;
};

inline std::filesystem::path synth_container(const std::string& preset) {
  static SynthDirs dirs;
  auto path = dirs.get(preset);
  INFO("synth preset " << preset << ": " << dirs.error_);
  REQUIRE_FALSE(path.empty());
  return path;
}

// Kimi-Linear's attention shapes (KDA head_dim 128, MLA nope 128 / rope 64 / v 128 /
// kv_lora 512, top-8 routing) on a small hidden size, vocabulary and expert count: the
// per-head loops and kernels run at their real widths.
const char* const kKimiLinearShaped = R"({
  "synth": {"experts": "vq3r", "trunk": "q4g", "quantize_small_matrices": true},
  "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"],
  "hidden_size": 256, "num_hidden_layers": 4, "first_k_dense_replace": 1,
  "intermediate_size": 512, "moe_intermediate_size": 128,
  "num_experts": 32, "num_experts_per_token": 8, "num_shared_experts": 1,
  "moe_renormalize": true, "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 2.446,
  "num_attention_heads": 2, "q_lora_rank": null, "kv_lora_rank": 512,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": true,
  "rms_norm_eps": 1e-05, "vocab_size": 512, "tie_word_embeddings": false,
  "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "linear_attn_config": {"head_dim": 128, "num_heads": 2, "short_conv_kernel_size": 4,
                         "kda_layers": [1, 2, 4], "full_attn_layers": [3]}
})";

// The container for a preset name, or for "kl-shaped" (kKimiLinearShaped), made once.
inline std::filesystem::path container_for(const std::string& preset) {
  if (preset != "kl-shaped") return synth_container(preset);
  static const std::filesystem::path dir = [] {
    const std::filesystem::path root = synth_container("tiny").parent_path();
    const std::filesystem::path config = root / "kl-shaped.json";
    std::ofstream(config) << kKimiLinearShaped;
    synth::SynthRequest request;
    request.config_file = config;
    auto spec = synth::make_spec(request);
    INFO((spec ? std::string() : spec.error().message));
    REQUIRE(spec);
    auto written = synth::write_container(*spec, root / "kl-shaped");
    INFO((written ? std::string() : written.error().message));
    REQUIRE(written);
    return root / "kl-shaped";
  }();
  return dir;
}

// kl-shaped with another expert format ("vq3r" is container_for("kl-shaped")), made once per
// process beside the presets.
inline std::filesystem::path kl_shaped(const std::string& experts) {
  if (experts == "vq3r") return container_for("kl-shaped");
  const std::filesystem::path root = synth_container("tiny").parent_path();
  const std::filesystem::path dir = root / ("kl-shaped-" + experts);
  if (std::filesystem::exists(dir / "manifest.json")) return dir;
  std::string json = kKimiLinearShaped;
  json.replace(json.find("\"vq3r\""), 6, "\"" + experts + "\"");
  const std::filesystem::path config = root / ("kl-shaped-" + experts + ".json");
  std::ofstream(config) << json;
  synth::SynthRequest request;
  request.config_file = config;
  auto spec = synth::make_spec(request);
  INFO((spec ? std::string() : spec.error().message));
  REQUIRE(spec);
  auto written = synth::write_container(*spec, dir);
  INFO((written ? std::string() : written.error().message));
  REQUIRE(written);
  return dir;
}

}  // namespace waste::test
