#include "shared/container/trunk.hpp"

#include <fcntl.h>

#include <cstring>
#include <string>
#include <unordered_map>

#include "shared/container/file_io.hpp"
#include "shared/fp16.hpp"
#include "shared/memory/anon_memory.hpp"

namespace waste {

namespace {

bool stays_on_disk(const Manifest& manifest, const TrunkTensorInfo& t) {
  if (!manifest.tensor_prefix.empty() && !t.name.starts_with(manifest.tensor_prefix)) return true;
  return t.quantized() && t.name.find("embed_tokens.weight") != std::string::npos;
}

std::uint16_t load_u16(const std::uint16_t* p, std::int64_t i) {
  std::uint16_t v;
  std::memcpy(&v, reinterpret_cast<const std::byte*>(p) + 2 * i, 2);
  return v;
}

// One row to f32; `payload_row` and `scales_row` point at that row's bytes.
void dequantize_row(const TrunkTensorInfo& info, const std::byte* payload_row, const std::uint16_t* scales_row,
                    std::span<float> out) {
  const std::int64_t n = info.cols();
  if (info.fmt == TensorFormat::f32) {
    std::memcpy(out.data(), payload_row, std::size_t(n) * 4);
    return;
  }
  const auto* p = reinterpret_cast<const std::uint8_t*>(payload_row);
  const std::int64_t g = info.group;
  for (std::int64_t c = 0; c < n; ++c) {
    int q = 0;
    switch (info.fmt) {
      case TensorFormat::q8g: q = static_cast<std::int8_t>(p[c]); break;
      case TensorFormat::q4g: q = int((c & 1) ? (p[c >> 1] >> 4) : (p[c >> 1] & 15)) - 8; break;
      case TensorFormat::q3g: {
        const std::int64_t bit = 3 * c;
        const unsigned v = unsigned(p[bit >> 3] >> (bit & 7)) | (unsigned(p[(bit >> 3) + 1]) << (8 - (bit & 7)));
        q = int(v & 7u) - 4;
        break;
      }
      default: break;
    }
    out[c] = float(q) * fp16_to_f32(load_u16(scales_row, c / g));
  }
}

}  // namespace

float dequantize_element(const TrunkTensorInfo& info, const std::byte* payload, const std::uint16_t* scales,
                         std::int64_t row, std::int64_t col) {
  const std::byte* prow = payload + row * info.row_stride_bytes();
  if (info.fmt == TensorFormat::f32) {
    float v;
    std::memcpy(&v, prow + col * 4, 4);
    return v;
  }
  const auto* p = reinterpret_cast<const std::uint8_t*>(prow);
  int q = 0;
  if (info.fmt == TensorFormat::q8g) {
    q = static_cast<std::int8_t>(p[col]);
  } else if (info.fmt == TensorFormat::q4g) {
    q = int((col & 1) ? (p[col >> 1] >> 4) : (p[col >> 1] & 15)) - 8;
  } else if (info.fmt == TensorFormat::q3g) {
    const std::int64_t bit = 3 * col;
    const unsigned v = unsigned(p[bit >> 3] >> (bit & 7)) | (unsigned(p[(bit >> 3) + 1]) << (8 - (bit & 7)));
    q = int(v & 7u) - 4;
  }
  return float(q) * fp16_to_f32(load_u16(scales, row * info.n_groups() + col / info.group));
}

TrunkLayout TrunkLayout::plan(const Manifest& manifest) {
  TrunkLayout layout;
  layout.image_offset.reserve(manifest.trunk.size());
  std::uint64_t off = 0;
  for (const auto& t : manifest.trunk) {
    if (stays_on_disk(manifest, t)) {
      layout.image_offset.push_back(kNotResident);
      continue;
    }
    layout.image_offset.push_back(off);
    off += t.payload_bytes() + t.scale_bytes();
    off = (off + kAlign - 1) / kAlign * kAlign;
  }
  layout.image_bytes = off;
  return layout;
}

namespace {

// One tensor's payload then its scales (quantised) into `dst` (payload_bytes + scale_bytes).
Status read_tensor(int fd, const std::filesystem::path& trunk_bin, const TrunkTensorInfo& t, std::span<std::byte> dst) {
  auto payload = dst.first(t.payload_bytes());
  auto n = pread_full(fd, payload, t.offset);
  if (!n) return std::unexpected(n.error().with_context(trunk_bin.string() + ": tensor " + t.name));
  if (*n != payload.size()) return make_error(Errc::io, trunk_bin.string() + ": tensor " + t.name + ": short read");
  if (t.quantized()) {
    auto scales = dst.subspan(t.payload_bytes(), t.scale_bytes());
    n = pread_full(fd, scales, t.scale_offset);
    if (!n) return std::unexpected(n.error().with_context(trunk_bin.string() + ": tensor " + t.name));
    if (*n != scales.size()) return make_error(Errc::io, trunk_bin.string() + ": tensor " + t.name + ": short read of scales");
  }
  return {};
}

}  // namespace

Status load_trunk_image(const std::filesystem::path& trunk_bin, const Manifest& manifest, const TrunkLayout& layout,
                        std::span<std::byte> image) {
  if (image.size() < layout.image_bytes) {
    return make_error(Errc::argument, "trunk image of " + std::to_string(image.size()) + " bytes < " +
                                          std::to_string(layout.image_bytes));
  }
  auto fd = open_file(trunk_bin, O_RDONLY);
  if (!fd) return std::unexpected(fd.error());
  for (std::size_t i = 0; i < manifest.trunk.size(); ++i) {
    if (layout.image_offset[i] == TrunkLayout::kNotResident) continue;
    const auto& t = manifest.trunk[i];
    WASTE_TRY(read_tensor(fd->get(), trunk_bin, t, image.subspan(layout.image_offset[i], t.payload_bytes() + t.scale_bytes())));
  }
  return {};
}

struct Trunk::Impl {
  std::vector<TrunkTensorInfo> infos;
  std::vector<TrunkTensor> tensors;
  std::unordered_map<std::string, std::size_t> by_name;  // without prefix
  std::string prefix;
  UniqueFd fd;                      // trunk.bin, for rows of on-disk tensors
  std::filesystem::path trunk_bin;
  std::span<const std::byte> image;
  std::shared_ptr<const void> keep_alive;
  std::uint64_t resident_bytes = 0;
};

Trunk::Trunk(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trunk::Trunk(Trunk&&) noexcept = default;
Trunk& Trunk::operator=(Trunk&&) noexcept = default;
Trunk::~Trunk() = default;

Result<Trunk> Trunk::open(const std::filesystem::path& container_dir, const Manifest& manifest,
                          std::span<const std::byte> image, std::shared_ptr<const void> keep_alive) {
  auto impl = std::make_unique<Impl>();
  impl->trunk_bin = container_dir / "trunk.bin";
  auto fd = open_file(impl->trunk_bin, O_RDONLY);
  if (!fd) return std::unexpected(fd.error());
  impl->fd = std::move(*fd);
  const TrunkLayout layout = TrunkLayout::plan(manifest);
  if (image.size() < layout.image_bytes) {
    return make_error(Errc::argument, "trunk image of " + std::to_string(image.size()) + " bytes < layout's " +
                                          std::to_string(layout.image_bytes));
  }
  impl->infos = manifest.trunk;
  impl->prefix = manifest.tensor_prefix;
  impl->image = image;
  impl->keep_alive = std::move(keep_alive);
  impl->resident_bytes = layout.image_bytes;
  impl->tensors.resize(impl->infos.size());
  for (std::size_t i = 0; i < impl->infos.size(); ++i) {
    TrunkTensor& t = impl->tensors[i];
    t.info = &impl->infos[i];
    if (layout.image_offset[i] != TrunkLayout::kNotResident) {
      t.payload = image.data() + layout.image_offset[i];
      t.scales = t.info->quantized() ? reinterpret_cast<const std::uint16_t*>(t.payload + t.info->payload_bytes()) : nullptr;
    }
    std::string_view name = t.info->name;
    if (!impl->prefix.empty() && name.starts_with(impl->prefix)) name.remove_prefix(impl->prefix.size());
    impl->by_name.emplace(std::string(name), i);
  }
  return Trunk(std::move(impl));
}

Result<Trunk> Trunk::load(const std::filesystem::path& container_dir, const Manifest& manifest) {
  const TrunkLayout layout = TrunkLayout::plan(manifest);
  // Huge-page-advised: the kernels stream every matrix of the image once per token.
  auto memory = AnonMemory::allocate(layout.image_bytes, "trunk image");
  if (!memory) return std::unexpected(memory.error());
  auto storage = std::make_shared<AnonMemory>(std::move(*memory));
  const std::span<const std::byte> image = storage->bytes().first(std::size_t(layout.image_bytes));
  WASTE_TRY(load_trunk_image(container_dir / "trunk.bin", manifest, layout, storage->bytes()));
  return open(container_dir, manifest, image, std::move(storage));
}

const TrunkTensor* Trunk::find(std::string_view name) const {
  auto it = impl_->by_name.find(std::string(name));
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

Status Trunk::read_row(const TrunkTensor& tensor, std::int64_t row, std::span<float> out) const {
  const TrunkTensorInfo& info = *tensor.info;
  if (row < 0 || row >= info.rows()) {
    return make_error(Errc::argument, "tensor " + info.name + ": row " + std::to_string(row) + " out of range 0.." +
                                          std::to_string(info.rows() - 1));
  }
  if (out.size() < std::size_t(info.cols())) return make_error(Errc::argument, "tensor " + info.name + ": output too small");
  if (tensor.resident()) {
    const std::byte* prow = tensor.payload + row * info.row_stride_bytes();
    const std::uint16_t* srow = info.quantized()
        ? reinterpret_cast<const std::uint16_t*>(reinterpret_cast<const std::byte*>(tensor.scales) + 2 * row * info.n_groups())
        : nullptr;
    dequantize_row(info, prow, srow, out);
    return {};
  }
  // On disk (embedding path): one pread for the row, one for its scales.
  const std::size_t stride = std::size_t(info.row_stride_bytes());
  const std::size_t ng = info.quantized() ? std::size_t(info.n_groups()) : 0;
  std::vector<std::byte> buf(stride + 2 * ng);
  auto n = pread_full(impl_->fd.get(), std::span(buf).first(stride), info.offset + std::uint64_t(row) * stride);
  if (!n || *n != stride) return make_error(Errc::io, impl_->trunk_bin.string() + ": tensor " + info.name + ": short read of row " + std::to_string(row));
  if (ng > 0) {
    n = pread_full(impl_->fd.get(), std::span(buf).subspan(stride), info.scale_offset + std::uint64_t(row) * ng * 2);
    if (!n || *n != 2 * ng) return make_error(Errc::io, impl_->trunk_bin.string() + ": tensor " + info.name + ": short read of row scales");
  }
  dequantize_row(info, buf.data(), reinterpret_cast<const std::uint16_t*>(buf.data() + stride), out);
  return {};
}

Result<std::vector<float>> Trunk::dequantize(const TrunkTensor& tensor) const {
  const auto rows = tensor.info->rows(), cols = tensor.info->cols();
  std::vector<float> out(std::size_t(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    WASTE_TRY(read_row(tensor, r, std::span(out).subspan(std::size_t(r * cols), std::size_t(cols))));
  }
  return out;
}

Status Trunk::read_tensor_bytes(const TrunkTensor& tensor, std::span<std::byte> dst) const {
  const TrunkTensorInfo& t = *tensor.info;
  const std::uint64_t need = t.payload_bytes() + t.scale_bytes();
  if (dst.size() != need) {
    return make_error(Errc::argument, "tensor " + t.name + ": " + std::to_string(dst.size()) + " bytes given for " +
                                          std::to_string(need));
  }
  if (tensor.resident()) {
    std::memcpy(dst.data(), tensor.payload, t.payload_bytes());
    if (t.quantized()) std::memcpy(dst.data() + t.payload_bytes(), tensor.scales, t.scale_bytes());
    return {};
  }
  return read_tensor(impl_->fd.get(), impl_->trunk_bin, t, dst);
}

std::uint64_t Trunk::resident_bytes() const { return impl_->resident_bytes; }

}  // namespace waste
