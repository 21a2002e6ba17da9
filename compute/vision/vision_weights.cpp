#include "compute/vision/vision_weights.hpp"

#include <fcntl.h>

#include <cstring>
#include <string_view>
#include <unordered_map>

#include "compute/forward/ops.hpp"
#include "shared/container/file_io.hpp"

namespace waste::vision {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

// Reads named tensors of trunk.bin into the weights' storage.
class WeightReader {
 public:
  WeightReader(VisionWeights& w, const Manifest& m, UniqueFd fd, std::filesystem::path bin)
      : w_(w), fd_(std::move(fd)), bin_(std::move(bin)) {
    for (const TrunkTensorInfo& t : m.trunk) by_name_.emplace(t.name, &t);
  }

  Result<const TrunkTensorInfo*> find(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return make_error(Errc::format, "vision tensor " + name + ": missing from the manifest");
    return it->second;
  }

  // A matrix [rows, cols] in any trunk matrix format; `any_shape` accepts a stored shape whose
  // leading dims multiply to rows (the [64, 64, D] position grid).
  Result<kernels::QuantMatrix> matrix(const std::string& name, std::int64_t rows, std::int64_t cols,
                                      bool any_shape = false) {
    auto found = find(name);
    if (!found) return std::unexpected(found.error());
    const TrunkTensorInfo& t = **found;
    const bool ok = any_shape ? (t.rows() == rows && t.cols() == cols)
                              : (t.shape.size() == 2 && t.shape[0] == rows && t.shape[1] == cols);
    if (!ok) {
      return make_error(Errc::format, "vision tensor " + name + ": expected shape " + shape_text({rows, cols}) +
                                          ", found " + shape_text(t.shape));
    }
    const auto fmt = static_cast<std::uint8_t>(t.fmt);
    if (fmt != 0 && fmt != 2 && fmt != 3 && fmt != 7) {
      return make_error(Errc::format, "vision tensor " + name + ": storage format " + tensor_format_name(t.fmt) +
                                          " is not a trunk matrix format");
    }
    kernels::QuantMatrix m{};
    auto payload = read(t, t.offset, t.payload_bytes());
    if (!payload) return std::unexpected(payload.error());
    m.payload = *payload;
    if (t.quantized()) {
      auto scales = read(t, t.scale_offset, t.scale_bytes());
      if (!scales) return std::unexpected(scales.error());
      m.scales = reinterpret_cast<const std::uint16_t*>(*scales);
    }
    m.rows = rows;
    m.cols = cols;
    m.row_stride = t.row_stride_bytes();
    m.group = t.group;
    m.fmt = fmt;
    return m;
  }

  Result<std::vector<float>> vector(const std::string& name, std::int64_t n) {
    auto found = find(name);
    if (!found) return std::unexpected(found.error());
    const TrunkTensorInfo& t = **found;
    if (t.fmt != TensorFormat::f32 || t.elements() != n) {
      return make_error(Errc::format, "vision tensor " + name + ": expected F32 " + shape_text({n}) + ", found " +
                                          tensor_format_name(t.fmt) + " " + shape_text(t.shape));
    }
    std::vector<float> v(static_cast<std::size_t>(n));
    auto got = pread_full(fd_.get(), std::as_writable_bytes(std::span(v)), t.offset);
    if (!got) return std::unexpected(got.error());
    if (*got != v.size() * sizeof(float)) return short_read(t);
    return v;
  }

 private:
  std::unexpected<Error> short_read(const TrunkTensorInfo& t) const {
    return make_error(Errc::io, bin_.string() + ": vision tensor " + t.name + " ends past the end of the file");
  }

  Result<const std::uint8_t*> read(const TrunkTensorInfo& t, std::uint64_t offset, std::uint64_t n) {
    // 64 spare bytes: the vector kernels may load a full step past a short row's tail.
    auto buf = std::make_unique<std::uint8_t[]>(std::size_t(n) + 64);
    std::memset(buf.get() + n, 0, 64);
    auto got = pread_full(fd_.get(), std::span(reinterpret_cast<std::byte*>(buf.get()), std::size_t(n)), offset);
    if (!got) return std::unexpected(got.error());
    if (*got != n) return short_read(t);
    w_.bytes_ += n;
    w_.storage_.push_back(std::move(buf));
    return w_.storage_.back().get();
  }

  VisionWeights& w_;
  UniqueFd fd_;
  std::filesystem::path bin_;
  std::unordered_map<std::string_view, const TrunkTensorInfo*> by_name_;
};

Result<VisionWeights> VisionWeights::load(const std::filesystem::path& dir, const Manifest& manifest,
                                          const VisionConfig& c) {
  const auto bin = dir / "trunk.bin";
  auto fd = open_file(bin, O_RDONLY);
  if (!fd) return std::unexpected(fd.error());
  VisionWeights w;
  WeightReader r(w, manifest, std::move(*fd), bin);
  const std::int64_t D = c.hidden, Q = c.qkv_hidden, I = c.inter, M = 4 * std::int64_t(c.hidden);

#define WASTE_VISION_GET(dst, expr)                          \
  do {                                                       \
    auto got_ = (expr);                                      \
    if (!got_) return std::unexpected(std::move(got_.error())); \
    dst = std::move(*got_);                                  \
  } while (0)

  WASTE_VISION_GET(w.patch_embed, r.matrix("vision_tower.patch_embed.proj.weight", D, c.patch_values()));
  kernels::QuantMatrix pos{};
  WASTE_VISION_GET(pos, r.matrix("vision_tower.patch_embed.pos_emb.weight", std::int64_t(c.pos_h) * c.pos_w, D,
                                 /*any_shape=*/true));
  w.pos_grid.resize(std::size_t(pos.rows) * std::size_t(D));
  for (std::int64_t row = 0; row < pos.rows; ++row) forward::dequantize_row(pos, row, w.pos_grid.data() + row * D);
  w.blocks.resize(std::size_t(c.layers));
  for (int b = 0; b < c.layers; ++b) {
    const std::string p = "vision_tower.encoder.blocks." + std::to_string(b) + ".";
    VisionBlockWeights& k = w.blocks[std::size_t(b)];
    WASTE_VISION_GET(k.norm0, r.vector(p + "norm0.weight", D));
    WASTE_VISION_GET(k.norm1, r.vector(p + "norm1.weight", D));
    WASTE_VISION_GET(k.wqkv, r.matrix(p + "wqkv.weight", 3 * Q, D));
    WASTE_VISION_GET(k.wo, r.matrix(p + "wo.weight", D, Q));
    WASTE_VISION_GET(k.fc0, r.matrix(p + "mlp.fc0.weight", I, D));
    WASTE_VISION_GET(k.fc1, r.matrix(p + "mlp.fc1.weight", D, I));
  }
  WASTE_VISION_GET(w.final_norm, r.vector("vision_tower.encoder.final_layernorm.weight", D));
  WASTE_VISION_GET(w.proj0, r.matrix("mm_projector.proj.0.weight", M, M));
  WASTE_VISION_GET(w.proj2, r.matrix("mm_projector.proj.2.weight", c.text_hidden, M));
  WASTE_VISION_GET(w.post_norm, r.vector("mm_projector.post_norm.weight", c.text_hidden));
#undef WASTE_VISION_GET
  return w;
}

}  // namespace waste::vision
