#include "shared/container/container.hpp"

#include <fcntl.h>

#include <sstream>

#include "shared/container/codebooks.hpp"
#include "shared/container/file_io.hpp"
#include "shared/container/v41_tensors.hpp"

namespace waste {
namespace {

constexpr std::uint64_t kMaxManifestBytes = 64ull << 20;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

enum class Need : std::uint8_t { matrix, vector_exact, f32_at_least };

struct Expected {
  std::string name;
  Need need;
  std::vector<std::int64_t> shape;  // matrix: [rows, cols]; vector: [n]; at_least: [min elements]
};

std::vector<Expected> expected_tensors(const ModelConfig& c) {
  std::vector<Expected> e;
  auto mat = [&](std::string n, std::int64_t r, std::int64_t k) { e.push_back({std::move(n), Need::matrix, {r, k}}); };
  auto vec = [&](std::string n, std::int64_t k) { e.push_back({std::move(n), Need::vector_exact, {k}}); };
  auto least = [&](std::string n, std::int64_t k) { e.push_back({std::move(n), Need::f32_at_least, {k}}); };
  const std::int64_t hid = c.hidden;
  mat("model.embed_tokens.weight", c.vocab, hid);
  vec("model.norm.weight", hid);
  mat("lm_head.weight", c.vocab, hid);
  if (c.attn_res_block > 0) {
    vec("model.output_attn_res_norm.weight", hid);
    vec("model.output_attn_res_proj.weight", hid);
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    vec(p + "input_layernorm.weight", hid);
    vec(p + "post_attention_layernorm.weight", hid);
    const std::string a = p + "self_attn.";
    if (c.is_kda(l)) {
      const std::int64_t H = c.kda_heads, D = c.kda_dim, C = H * D;
      for (const char* x : {"q", "k", "v"}) {
        mat(a + x + "_proj.weight", C, hid);
        least(a + x + "_conv1d.weight", C * c.conv_k);
      }
      mat(a + "f_a_proj.weight", D, hid);
      mat(a + "f_b_proj.weight", C, D);
      mat(a + "b_proj.weight", H, hid);
      least(a + "A_log", H);
      least(a + "dt_bias", C);
      if (c.full_rank_gate) {
        mat(a + "g_proj.weight", C, hid);
      } else {
        mat(a + "g_a_proj.weight", D, hid);
        mat(a + "g_b_proj.weight", C, D);
      }
      vec(a + "o_norm.weight", D);
      mat(a + "o_proj.weight", hid, C);
    } else {
      const std::int64_t nh = c.n_heads, qd = c.qk_nope + c.qk_rope;
      if (c.q_lora > 0) {
        mat(a + "q_a_proj.weight", c.q_lora, hid);
        vec(a + "q_a_layernorm.weight", c.q_lora);
        mat(a + "q_b_proj.weight", nh * qd, c.q_lora);
      } else {
        mat(a + "q_proj.weight", nh * qd, hid);
      }
      mat(a + "kv_a_proj_with_mqa.weight", c.kv_lora + c.qk_rope, hid);
      vec(a + "kv_a_layernorm.weight", c.kv_lora);
      mat(a + "kv_b_proj.weight", nh * (c.qk_nope + c.v_head), c.kv_lora);
      if (c.mla_output_gate) mat(a + "g_proj.weight", nh * c.v_head, hid);
      mat(a + "o_proj.weight", hid, nh * c.v_head);
    }
    if (c.attn_res_block > 0) {
      for (const char* x : {"self_attention_res_norm", "self_attention_res_proj", "mlp_res_norm", "mlp_res_proj"}) {
        vec(p + x + ".weight", hid);
      }
    }
    if (c.is_moe(l)) {
      const std::string m = p + "block_sparse_moe.";
      const std::int64_t S = c.shared_inter();
      mat(m + "gate.weight", c.n_experts, hid);
      mat(m + "shared_experts.gate_proj.weight", S, hid);
      mat(m + "shared_experts.up_proj.weight", S, hid);
      mat(m + "shared_experts.down_proj.weight", hid, S);
      if (c.latent_dim > 0) {
        mat(m + "routed_expert_down_proj.weight", c.latent_dim, hid);
        mat(m + "routed_expert_up_proj.weight", hid, c.latent_dim);
        if (c.latent_norm) vec(m + "routed_expert_norm.weight", c.latent_dim);
      }
    } else {
      mat(p + "mlp.gate_proj.weight", c.dense_inter, hid);
      mat(p + "mlp.up_proj.weight", c.dense_inter, hid);
      mat(p + "mlp.down_proj.weight", hid, c.dense_inter);
    }
  }
  return e;
}

}  // namespace

Status check_trunk_bounds(const TrunkTensorInfo& t, std::uint64_t trunk_file_bytes) {
  const std::uint64_t pend = t.offset + t.payload_bytes();
  if (pend > trunk_file_bytes) {
    return make_error(Errc::format, "trunk tensor " + t.name + ": payload [" + std::to_string(t.offset) + ", " +
                                        std::to_string(pend) + ") exceeds trunk.bin size " +
                                        std::to_string(trunk_file_bytes));
  }
  if (t.quantized()) {
    const std::uint64_t send = t.scale_offset + t.scale_bytes();
    if (send > trunk_file_bytes) {
      return make_error(Errc::format, "trunk tensor " + t.name + ": scales [" + std::to_string(t.scale_offset) + ", " +
                                          std::to_string(send) + ") exceed trunk.bin size " +
                                          std::to_string(trunk_file_bytes));
    }
  }
  return {};
}

Status validate_text_tensors(const Manifest& manifest) {
  if (manifest.config.is_deepseek_v41()) {
    // DeepSeek-V4.1: the one list of v41_tensors.hpp (the converter and the engine's bind use it).
    for (const V41Tensor& x : v41_trunk_tensors(manifest.config)) {
      const TrunkTensorInfo* t = manifest.find_tensor(x.name);
      const std::string full = manifest.tensor_prefix + x.name;
      if (t == nullptr && !x.required) continue;
      if (t == nullptr) return make_error(Errc::format, "tensor " + full + ": missing");
      if (t->shape != x.shape) {
        return make_error(Errc::format, "tensor " + full + ": expected shape " + shape_text(x.shape) + ", found " +
                                            shape_text(t->shape));
      }
    }
    return {};
  }
  for (const Expected& x : expected_tensors(manifest.config)) {
    const TrunkTensorInfo* t = manifest.find_tensor(x.name);
    const std::string full = manifest.tensor_prefix + x.name;
    if (t == nullptr) return make_error(Errc::format, "tensor " + full + ": missing");
    switch (x.need) {
      case Need::matrix:
        if (t->shape != x.shape) {
          return make_error(Errc::format, "tensor " + full + ": expected shape " + shape_text(x.shape) + ", found " +
                                              shape_text(t->shape));
        }
        break;
      case Need::vector_exact:
        if (t->elements() != x.shape[0]) {
          return make_error(Errc::format, "tensor " + full + ": expected shape " + shape_text(x.shape) + ", found " +
                                              shape_text(t->shape));
        }
        [[fallthrough]];
      case Need::f32_at_least:
        if (t->fmt != TensorFormat::f32) {
          return make_error(Errc::format, "tensor " + full + ": expected F32, found " + tensor_format_name(t->fmt));
        }
        if (t->elements() < x.shape[0]) {
          return make_error(Errc::format, "tensor " + full + ": expected at least " + std::to_string(x.shape[0]) +
                                              " elements, found shape " + shape_text(t->shape));
        }
        break;
    }
  }
  return {};
}

Result<std::string> read_manifest_text(const std::filesystem::path& dir) {
  constexpr const char* kHint = "make one with `waste synth` or `waste convert`";
  std::error_code ec;
  const auto status = std::filesystem::status(dir, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    return make_error(Errc::format, dir.string() + " does not exist (a model is a NAME.waste directory: " + kHint + ")");
  }
  if (!ec && status.type() != std::filesystem::file_type::directory) {
    return make_error(Errc::format, dir.string() + " is not a WASTE container (not a directory): " + kHint);
  }
  const ContainerFiles files{dir};
  if (!ec && !std::filesystem::exists(files.manifest(), ec) && !ec) {
    return make_error(Errc::format, dir.string() + " is not a WASTE container (no manifest.json): " + kHint);
  }
  return read_text_file(files.manifest(), kMaxManifestBytes);
}

Result<ContainerInfo> ContainerInfo::open(const std::filesystem::path& dir) {
  ContainerInfo info;
  info.files.dir = dir;
  auto text = read_manifest_text(dir);
  if (!text) return std::unexpected(text.error());
  auto manifest = Manifest::parse(*text);
  if (!manifest) return std::unexpected(manifest.error().with_context(info.files.manifest().string()));
  info.manifest = std::move(*manifest);
  const Manifest& m = info.manifest;

  {
    auto fd = open_file(info.files.trunk(), O_RDONLY);
    if (!fd) return std::unexpected(fd.error());
    auto size = file_size(fd->get(), info.files.trunk());
    if (!size) return std::unexpected(size.error());
    info.trunk_file_bytes = *size;
  }
  for (const auto& t : m.trunk) {
    auto s = check_trunk_bounds(t, info.trunk_file_bytes);
    if (!s) return std::unexpected(s.error().with_context(info.files.trunk().string()));
  }

  if (m.config.n_experts > 0) {
    auto g = ExpertGeometry::from(m.config, m.quant);
    if (!g) return std::unexpected(g.error().with_context(info.files.manifest().string()));
    info.geometry = *g;
    auto fd = open_file(info.files.codebooks(), O_RDONLY);
    if (!fd) return std::unexpected(fd.error());
    auto size = file_size(fd->get(), info.files.codebooks());
    if (!size) return std::unexpected(size.error());
    info.n_codebooks = static_cast<int>(std::min<std::uint64_t>(*size / Codebooks::record_bytes(m.quant), 1 << 30));
    const int per_layer = 3 * m.quant.stages;
    for (const auto& [layer, bank] : m.banks) {
      const std::string where = "layer " + std::to_string(layer) + " (" + bank.file + ")";
      if (per_layer > info.n_codebooks || bank.codebook_base > info.n_codebooks - per_layer) {
        return make_error(Errc::format, where + ": codebook_base " + std::to_string(bank.codebook_base) + " + " +
                                            std::to_string(per_layer) + " books exceeds the " +
                                            std::to_string(info.n_codebooks) + " in codebooks.bin");
      }
      const std::uint64_t rec = bank.record_bytes();
      if (rec % kRecordAlign != 0) {
        return make_error(Errc::format, where + ": record size " + std::to_string(rec) +
                                            " is not a multiple of 4096");
      }
      if (rec < info.geometry.payload_end) {
        return make_error(Errc::format, where + ": record size " + std::to_string(rec) +
                                            " is smaller than the expert payload of " +
                                            std::to_string(info.geometry.payload_end) + " bytes");
      }
      const auto path = dir / bank.file;
      auto bfd = open_file(path, O_RDONLY);
      if (!bfd) return std::unexpected(bfd.error());
      auto bsize = file_size(bfd->get(), path);
      if (!bsize) return std::unexpected(bsize.error());
      if (*bsize != bank.bytes) {
        return make_error(Errc::format, path.string() + ": size " + std::to_string(*bsize) + " != manifest bytes " +
                                            std::to_string(bank.bytes));
      }
    }
  }
  auto tensors = validate_text_tensors(m);
  if (!tensors) return std::unexpected(tensors.error().with_context(info.files.manifest().string()));

  std::error_code ec;
  info.has_tokenizer = std::filesystem::is_regular_file(info.files.tokenizer(), ec);
  info.has_specials = std::filesystem::is_regular_file(info.files.specials(), ec);
  info.has_chat_format = std::filesystem::is_regular_file(info.files.chat(), ec);
  return info;
}

}  // namespace waste
