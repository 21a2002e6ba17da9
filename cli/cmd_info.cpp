// waste info MODEL: what a container holds, from its manifest and file sizes (no payload reads).
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "shared/container/container.hpp"

namespace waste::cli {
namespace {

struct InfoArgs {
  std::string model;
  bool json = false;
};

std::string layer_kind(const ModelConfig& c, int l) {
  return std::string(c.is_kda(l) ? "KDA" : "MLA") + (c.is_moe(l) ? "+MoE" : "+dense");
}

// Run-length layer kinds: "0 KDA+dense, 1-2 KDA+MoE, 3 MLA+MoE, 4 KDA+MoE".
std::string layer_summary(const ModelConfig& c) {
  std::string out;
  for (int l = 0; l < c.n_layers;) {
    int end = l;
    while (end + 1 < c.n_layers && layer_kind(c, end + 1) == layer_kind(c, l)) ++end;
    if (!out.empty()) out += ", ";
    out += std::to_string(l) + (end > l ? "-" + std::to_string(end) : "") + " " + layer_kind(c, l);
    l = end + 1;
  }
  return out;
}

// "rotary theta 10000, YaRN factor 40 (original 4096, beta_fast 32, beta_slow 1), softmax scale x1.8739"
std::string rotary_summary(const ModelConfig& c) {
  const RopeConfig& r = c.rope;
  if (!r.enabled) return c.n_mla_layers() > 0 ? "none (NoPE: the qk_rope dims pass unrotated)" : "none";
  char buf[256];
  if (!r.yarn) {
    std::snprintf(buf, sizeof buf, "theta %g, no scaling (interleaved pairs)", r.theta);
    return buf;
  }
  const double m = r.attention_mscale();
  std::snprintf(buf, sizeof buf,
                "theta %g, YaRN factor %g (original %d, beta_fast %g, beta_slow %g), softmax scale x%.4f", r.theta,
                r.factor, r.original_max_pos, r.beta_fast, r.beta_slow, m * m);
  return buf;
}

// "sigmoid + e_score_correction_bias, 8 groups (best 4 kept), renormalized, x2.5"
std::string routing_summary(const ModelConfig& c, bool has_bias) {
  std::string out = c.scoring == RouterScoring::softmax ? "softmax" : "sigmoid";
  if (has_bias) out += " + e_score_correction_bias (selection only)";
  if (c.grouped_routing()) {
    out += ", " + std::to_string(c.n_group) + " groups of " + std::to_string(c.n_experts / c.n_group) + " (best " +
           std::to_string(c.topk_group) + " kept)";
  } else {
    out += ", no group limit";
  }
  if (c.renormalize) out += ", renormalized";
  char buf[32];
  std::snprintf(buf, sizeof buf, ", x%g", c.routed_scale);
  return out + buf;
}

std::string human_count(std::uint64_t n) {
  char buf[32];
  if (n >= 1'000'000'000ull) std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else if (n >= 1'000'000ull) std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  else std::snprintf(buf, sizeof buf, "%llu", (unsigned long long)n);
  return buf;
}

int run_info(const InfoArgs& args) {
  auto info = ContainerInfo::open(args.model);
  if (!info) {
    std::fprintf(stderr, "waste info: %s\n", info.error().message.c_str());
    return 1;
  }
  const Manifest& m = info->manifest;
  const ModelConfig& c = m.config;
  std::uint64_t trunk_params = 0, embed_params = 0;
  std::map<std::string, std::pair<int, std::uint64_t>> formats;  // name -> (count, bytes)
  for (const auto& t : m.trunk) {
    auto& f = formats[tensor_format_name(t.fmt)];
    ++f.first;
    f.second += t.payload_bytes() + t.scale_bytes();
    if (!m.tensor_prefix.empty() && !t.name.starts_with(m.tensor_prefix)) continue;  // vision tower
    trunk_params += std::uint64_t(t.elements());
    if (t.name.find("embed_tokens.weight") != std::string::npos) embed_params += std::uint64_t(t.elements());
  }
  const int n_moe = c.n_moe_layers();
  const std::uint64_t per_expert = 3ull * std::uint64_t(c.moe_inter) * std::uint64_t(c.expert_input_dim());
  const std::uint64_t total = trunk_params + std::uint64_t(n_moe) * c.n_experts * per_expert;
  const std::uint64_t active = trunk_params - embed_params + std::uint64_t(n_moe) * c.top_k * per_expert;
  const std::uint64_t record = c.n_experts > 0 ? info->geometry.record_bytes : 0;
  const std::uint64_t per_token = record * std::uint64_t(c.top_k) * std::uint64_t(n_moe);
  bool has_bias = false;
  for (const auto& t : m.trunk) has_bias = has_bias || t.name.ends_with("gate.e_score_correction_bias");

  if (args.json) {
    nlohmann::json j;
    j["path"] = args.model;
    j["arch"] = c.arch;
    j["tensor_prefix"] = m.tensor_prefix;
    j["layers"] = c.n_layers;
    nlohmann::json kinds = nlohmann::json::array();
    for (int l = 0; l < c.n_layers; ++l) kinds.push_back(layer_kind(c, l));
    j["layer_kinds"] = kinds;
    j["hidden"] = c.hidden;
    j["vocab"] = c.vocab;
    j["experts"] = c.n_experts;
    j["top_k"] = c.top_k;
    j["shared_experts"] = c.n_shared;
    j["moe_layers"] = n_moe;
    j["rotary"] = {{"enabled", c.rope.enabled}};
    if (c.rope.enabled) {
      j["rotary"]["theta"] = c.rope.theta;
      j["rotary"]["yarn_factor"] = c.rope.yarn ? c.rope.factor : 1.0;
      if (c.rope.yarn) {
        j["rotary"]["original_max_position_embeddings"] = c.rope.original_max_pos;
        j["rotary"]["beta_fast"] = c.rope.beta_fast;
        j["rotary"]["beta_slow"] = c.rope.beta_slow;
      }
      j["rotary"]["softmax_mscale2"] = c.rope.attention_mscale() * c.rope.attention_mscale();
    }
    if (c.n_experts > 0) {
      j["routing"] = {{"scoring", c.scoring == RouterScoring::softmax ? "softmax" : "sigmoid"},
                      {"bias", has_bias},
                      {"n_group", c.grouped_routing() ? c.n_group : 1},
                      {"topk_group", c.grouped_routing() ? c.topk_group : 1},
                      {"renormalize", c.renormalize},
                      {"routed_scale", c.routed_scale}};
    }
    j["mtp_layers"] = c.n_mtp;
    j["mtp_ignored"] = c.n_mtp > 0;
    j["expert_format"] = m.quant.fmt;
    j["expert_stages"] = m.quant.stages;
    j["expert_entries"] = m.quant.entries;
    j["expert_index_bits"] = m.quant.index_bits;
    j["record_bytes"] = record;
    j["expert_bytes_per_token"] = per_token;
    j["params_total"] = total;
    j["params_active"] = active;
    nlohmann::json f = nlohmann::json::object();
    for (const auto& [name, v] : formats) f[name] = {{"tensors", v.first}, {"bytes", v.second}};
    j["trunk_formats"] = f;
    j["trunk_bytes"] = info->trunk_file_bytes;
    if (c.uses_mhc()) j["mhc"] = {{"streams", c.hc_mult}, {"sinkhorn_iters", c.hc_sinkhorn_iters}, {"eps", c.hc_eps}};
    if (c.swiglu_limit > 0.0f) j["swiglu_limit"] = c.swiglu_limit;
    if (c.has_indexer()) {
      j["indexer"] = {{"topk", c.index_topk},
                      {"kpool", c.index_kpool},
                      {"n_heads", c.index_n_heads},
                      {"head_dim", c.index_head_dim},
                      {"always_select_tail", c.index_kpool_always_select_tail}};
    }
    j["codebooks"] = info->n_codebooks;
    j["tokenizer"] = info->has_tokenizer;
    j["specials"] = info->has_specials;
    j["chat_format"] = info->has_chat_format;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model:        %s\n", args.model.c_str());
  std::printf("architecture: %s%s\n", c.arch.c_str(),
              m.tensor_prefix.empty() ? "" : (" (tensors under \"" + m.tensor_prefix + "\")").c_str());
  std::printf("layers:       %d (%d KDA, %d MLA; %d MoE): %s\n", c.n_layers, c.n_kda_layers(), c.n_mla_layers(), n_moe,
              layer_summary(c).c_str());
  std::printf("hidden:       %d, vocab %d\n", c.hidden, c.vocab);
  if (c.n_experts > 0) {
    std::printf("experts:      %d per MoE layer, top-%d, %d shared\n", c.n_experts, c.top_k, c.n_shared);
    std::printf("expert quant: %s (%d stages x %d entries x dim %d, %d-bit indices, %.2f bits/weight)\n",
                m.quant.fmt.c_str(), m.quant.stages, m.quant.entries, m.quant.vec_dim, m.quant.index_bits,
                m.quant.bits_per_weight());
    std::printf("routing:      %s\n", routing_summary(c, has_bias).c_str());
    std::printf("record:       %llu bytes; %llu expert bytes per token (top-%d x %d layers)\n",
                (unsigned long long)record, (unsigned long long)per_token, c.top_k, n_moe);
  }
  if (c.n_mla_layers() > 0) std::printf("rotary:       %s\n", rotary_summary(c).c_str());
  if (c.uses_mhc()) {
    std::printf("residual:     mHC, %d streams, %d Sinkhorn iterations (eps %g)\n", c.hc_mult, c.hc_sinkhorn_iters,
                double(c.hc_eps));
  }
  if (c.swiglu_limit > 0.0f) std::printf("swiglu clamp: %g (gate <= limit, |up| <= limit)\n", double(c.swiglu_limit));
  if (c.has_indexer()) {
    std::printf("indexer:      DSA k-pool, %d heads x %d, top %d positions, pools of %d%s\n", c.index_n_heads,
                c.index_head_dim, c.index_topk, c.index_kpool, c.index_kpool_always_select_tail ? " + tail" : "");
  }
  if (c.n_mtp > 0) {
    std::printf("mtp:          %d multi-token-prediction layer%s in the source, ignored (not converted, never run)\n",
                c.n_mtp, c.n_mtp == 1 ? "" : "s");
  }
  std::printf("parameters:   %s total, %s active (RVQ experts counted as their logical weights)\n",
              human_count(total).c_str(), human_count(active).c_str());
  std::string fmts;
  for (const auto& [name, v] : formats) {
    if (!fmts.empty()) fmts += ", ";
    fmts += name + " " + std::to_string(v.first);
  }
  std::printf("trunk:        %zu tensors, %.1f MB (%s)\n", m.trunk.size(), info->trunk_file_bytes / 1e6, fmts.c_str());
  std::printf("tokenizer:    %s, specials %s, chat format %s\n", info->has_tokenizer ? "yes" : "no",
              info->has_specials ? "yes" : "no", info->has_chat_format ? "yes" : "no");
  return 0;
}

const CommandRegistration kRegistration{Command{
    "info", "Describe a container: layers, experts, formats, parameter counts",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<InfoArgs>();
      sub.add_option("model", args->model, "Container directory (NAME.waste)")->type_name("DIR")->required();
      sub.add_flag("--json", args->json, "Machine-readable output");
      return [args] { return run_info(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
