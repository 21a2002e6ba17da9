#include "shared/memory/memory_plan.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace waste {

namespace {

using Json = nlohmann::ordered_json;   // "first bank" means first in file order

// Lookup with a fallback, like the reference planner: a missing or non-numeric key is the default.
std::int64_t get_int(const Json& obj, const char* key, std::int64_t fallback) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return fallback;
  return it->get<std::int64_t>();
}

const Json& get_obj(const Json& obj, const char* key) {
  static const Json kEmpty = Json::object();
  if (!obj.is_object()) return kEmpty;
  const auto it = obj.find(key);
  return it == obj.end() ? kEmpty : *it;
}

// Engine constants the scratch buffers are sized from (reference model.h).
constexpr std::uint64_t kRouterRowOffset = 4096;  // router scores live past the attention rows
constexpr std::uint64_t kLutBlock = 32;           // int8 LUT quantisation block

std::uint64_t u(std::int64_t v) { return v > 0 ? std::uint64_t(v) : 0; }

Result<MemoryPlan> plan_from_json(std::string_view manifest_json, std::uint32_t ctx_tokens) {
  Json doc = Json::parse(manifest_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return make_error(Errc::format, "manifest.json is not a JSON object");
  MemoryPlan plan;

  const std::string prefix = doc.value("tensor_prefix", std::string());
  const Json& trunk = get_obj(doc, "trunk");
  if (trunk.is_array()) {
    for (const Json& entry : trunk) {
      const std::string name = entry.is_object() ? entry.value("name", std::string()) : std::string();
      const std::int64_t fmt = get_int(entry, "fmt", 0);
      // The quantised embedding is read one row per token from disk, never held.
      if (fmt != 0 && name.find("embed_tokens.weight") != std::string::npos) continue;
      const std::uint64_t bytes = u(get_int(entry, "bytes", 0));
      if (!prefix.empty() && name.rfind(prefix, 0) != 0) {
        plan.vision_bytes += bytes;
        continue;
      }
      plan.trunk_bytes += bytes;
    }
  }

  const Json& cfg = get_obj(doc, "config");
  const std::uint64_t layers = u(get_int(cfg, "num_hidden_layers", 0));
  const std::uint64_t hidden = u(get_int(cfg, "hidden_size", 0));
  const std::uint64_t n_heads = u(get_int(cfg, "num_attention_heads", 0));
  const std::uint64_t kv_lora = u(get_int(cfg, "kv_lora_rank", 0));
  const std::uint64_t qk_rope = u(get_int(cfg, "qk_rope_head_dim", 0));
  const Json& lac = get_obj(cfg, "linear_attn_config");
  const std::uint64_t kda_heads = u(get_int(lac, "num_heads", 0));
  const std::uint64_t kda_dim = u(get_int(lac, "head_dim", 0));
  const std::uint64_t conv_k = u(get_int(lac, "short_conv_kernel_size", 4));
  const Json& kda_layers = get_obj(lac, "kda_layers");
  const std::uint64_t n_kda = kda_layers.is_array() ? kda_layers.size() : 0;
  const std::uint64_t n_mla = layers > n_kda ? layers - n_kda : 0;

  // MLA keeps the latent plus the rope dims per token (kv_b_proj is absorbed).
  plan.state_bytes = n_kda * kda_heads * kda_dim * kda_dim * 4 +
                     n_kda * 3 * (conv_k > 0 ? conv_k - 1 : 0) * kda_heads * kda_dim * 4 +
                     n_mla * std::uint64_t(ctx_tokens) * (kv_lora + qk_rope) * 4;

  const std::uint64_t moe_inter = u(get_int(cfg, "moe_intermediate_size", 0));
  const std::uint64_t dense_inter = u(get_int(cfg, "intermediate_size", std::int64_t(moe_inter)));
  const std::uint64_t vocab = u(get_int(cfg, "vocab_size", 0));
  const std::uint64_t latent = u(get_int(cfg, "routed_expert_hidden_size", std::int64_t(hidden)));
  const std::int64_t n_shared_raw = get_int(cfg, "num_shared_experts", 1);
  const std::uint64_t n_shared = n_shared_raw > 0 ? std::uint64_t(n_shared_raw) : 1;
  const std::uint64_t attn_res = u(get_int(cfg, "attn_res_block_size", 0));
  const std::uint64_t n_experts = u(get_int(cfg, "num_experts", 0));
  const std::uint64_t top_k = u(get_int(cfg, "num_experts_per_token", 8));

  const Json& quant = get_obj(doc, "expert_quant");
  const std::int64_t stages = get_int(quant, "stages", 3);
  const std::int64_t vec_dim = get_int(quant, "vec_dim", 8);
  const std::int64_t entries = get_int(quant, "entries", 256);
  if (stages < 1 || stages > 8) return make_error(Errc::format, "expert_quant.stages: " + std::to_string(stages) + " is out of range 1..8");
  if (vec_dim < 1 || vec_dim > 64) return make_error(Errc::format, "expert_quant.vec_dim: " + std::to_string(vec_dim) + " is out of range 1..64");
  if (entries < 1 || entries > 256) return make_error(Errc::format, "expert_quant.entries: " + std::to_string(entries) + " is out of range 1..256");

  const std::uint64_t T = kPrefillChunkTokens;
  const std::uint64_t n_res = attn_res ? layers / attn_res + 2 : 1;
  const std::uint64_t big = std::max(hidden, kda_heads * kda_dim);
  const std::uint64_t wide = std::max(hidden, latent);
  const std::uint64_t lut_wide = std::max(wide, moe_inter);

  std::uint64_t sc = 0;
  sc += 3 * moe_inter * hidden * 4;                          // expert staging
  sc += 2 * std::max(dense_inter, moe_inter) * 4;
  {
    // One buffer shared by attention scores, KDA rows and router scores: the largest user.
    std::uint64_t att = std::uint64_t(ctx_tokens) * n_heads;
    att = std::max({att, kda_heads * kda_dim, kRouterRowOffset + 2 * n_experts});
    sc += (att + 1024) * 4;
  }
  sc += vocab * 4;                                           // logits
  sc += (8 * big + 8 * moe_inter + 8 * dense_inter + 512) * 4;
  sc += 3 * n_heads * (kv_lora ? kv_lora : 1) * 4;           // MLA absorption
  sc += (n_res + 4) * hidden * 4;                            // AttnRes
  sc += T * hidden * 4 * 3;                                  // chunk x / norm / residual
  const std::uint64_t lut = (lut_wide / std::uint64_t(vec_dim) + 1) * std::uint64_t(stages) * std::uint64_t(entries);
  const std::uint64_t n_lut_scales = lut / (std::uint64_t(stages) * std::uint64_t(entries)) / kLutBlock + 2;
  sc += ((2 * T + 1) * lut + 64) * 4;                        // chunk LUTs
  sc += 3 * lut * 4;                                         // decode LUTs
  sc += 3 * lut + 3 * n_lut_scales * 4;                      // int8 decode LUT shadows
  sc += (2 * T + 1) * (lut + n_lut_scales * 4) + 64;         // int8 chunk LUT shadows
  sc += top_k * (2 * moe_inter + latent) * 4;                // per-expert gate/up/acc
  sc += top_k * lut * 4;                                     // per-expert LUTs
  sc += top_k * (lut + n_lut_scales * 4);                    // and their int8 shadows
  sc += (T * (2 * moe_inter * n_shared + hidden) + 64) * 4;  // chunk shared expert
  sc += T * (2 * latent + 2 * hidden) * 4;
  sc += 2 * T * dense_inter * 4;
  sc += 3 * moe_inter * latent * 4;                          // one expert
  sc += T * n_res * hidden * 4 + T * hidden * 4;
  sc += T * 64 * 12;                                         // chunk routing tables
  plan.scratch_bytes = sc;

  const Json& banks = get_obj(doc, "layers");
  if (banks.is_object()) {
    bool first = true;
    for (const auto& [key, bank] : banks.items()) {
      const std::uint64_t bytes = u(get_int(bank, "bytes", 0));
      const std::uint64_t experts = u(get_int(bank, "experts", 1));
      const std::uint64_t rec = experts ? bytes / experts : 0;
      if (first) plan.record_bytes = rec;
      first = false;
      plan.max_record_bytes = std::max(plan.max_record_bytes, rec);
    }
  }
  plan.top_k = int(top_k);
  plan.n_layers = int(layers);
  plan.min_expert_cache_bytes = plan.record_bytes * top_k * 2;
  plan.floor_bytes = plan.trunk_bytes + plan.state_bytes + plan.scratch_bytes + plan.min_expert_cache_bytes;
  plan.working_set_bytes = plan.record_bytes * top_k * layers;
  plan.recommended_bytes = plan.floor_bytes + 3 * plan.working_set_bytes;
  return plan;
}

}  // namespace

Result<MemoryPlan> plan_memory(std::string_view manifest_json, std::uint32_t ctx_tokens) {
  try {
    return plan_from_json(manifest_json, ctx_tokens);
  } catch (const nlohmann::json::exception& e) {
    // A key of the wrong type (a string where a name should be an object, ...).
    return make_error(Errc::format, std::string("manifest.json: ") + e.what());
  }
}

Result<MemoryPlan> plan_memory(const std::filesystem::path& container, std::uint32_t ctx_tokens) {
  const std::filesystem::path file = container / "manifest.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(Errc::io, file.string() + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  auto plan = plan_memory(std::string_view(text.str()), ctx_tokens);
  if (!plan) return std::unexpected(plan.error().with_context(file.string()));
  return plan;
}

}  // namespace waste
