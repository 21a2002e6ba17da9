#include "compute/convert/dtype_decode.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace waste::convert {
namespace {

template <class T>
T load_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // the host is little-endian (x86-64, AArch64), like the files
  return v;
}

std::string where(const std::string& name, const std::filesystem::path* shard) {
  return "tensor " + name + " (shard " + (shard ? shard->filename().string() : std::string("?")) + ")";
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

bool ends_with(const std::string& s, std::string_view suffix) { return s.size() >= suffix.size() && s.ends_with(suffix); }

}  // namespace

float f16_to_f32_ieee(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t(h >> 15) << 31;
  const std::uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float mag;
  if (e == 0) {
    mag = std::ldexp(float(m), -24);
  } else if (e == 31) {
    return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  } else {
    mag = std::bit_cast<float>(((e + 112) << 23) | (m << 13));
  }
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(mag) | sign);
}

float bf16_to_f32(std::uint16_t h) noexcept { return std::bit_cast<float>(std::uint32_t(h) << 16); }

float f8_e4m3fn_to_f32(std::uint8_t b) noexcept {
  const bool neg = b & 0x80;
  const int e = (b >> 3) & 0xf, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
  return neg ? -mag : mag;
}

float f8_e5m2_to_f32(std::uint8_t b) noexcept {
  // E5M2 is the top byte of an IEEE half.
  return f16_to_f32_ieee(std::uint16_t(std::uint16_t(b) << 8));
}

float e2m1_to_f32(std::uint8_t nibble) noexcept {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[nibble & 7];
  return (nibble & 8) ? -v : v;
}

float e8m0_to_f32(std::uint8_t e) noexcept {
  if (e == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, int(e) - 127);
}

std::int64_t WeightSource::rows() const {
  std::int64_t r = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

Result<WeightSource> resolve_weight(const Checkpoint& ck, const std::string& name, BlockSize fp8_block) {
  WeightSource w;
  w.name = name;
  auto main = ck.find(name);
  if (!main) {
    // MXFP4 pair: <base>.weight_packed + <base>.weight_scale (compressed-tensors, K3 experts).
    if (ends_with(name, ".weight")) {
      const std::string base = name.substr(0, name.size() - 7);
      auto packed = ck.find(base + ".weight_packed");
      if (packed) {
        const std::string pw = where(base + ".weight_packed", packed->shard);
        auto scale = ck.find(base + ".weight_scale");
        if (!scale) return make_error(Errc::format, pw + ": its scale companion " + base + ".weight_scale is missing");
        const std::string sw = where(base + ".weight_scale", scale->shard);
        const TensorEntry& p = *packed->entry;
        const TensorEntry& s = *scale->entry;
        if (p.dtype != Dtype::u8 || p.shape.size() != 2) {
          return make_error(Errc::format, pw + ": MXFP4 data must be U8 2-D, is " + dtype_name(p.dtype) + " " + shape_text(p.shape));
        }
        const std::int64_t m = p.shape[0], n = p.shape[1] * 2;
        if (n % 32 != 0) return make_error(Errc::format, pw + ": " + std::to_string(n) + " columns are not a multiple of 32");
        const std::vector<std::int64_t> want{m, n / 32};
        if (s.dtype != Dtype::u8 || s.shape != want) {
          return make_error(Errc::format, sw + ": MXFP4 scales must be U8 " + shape_text(want) + ", are " +
                                              dtype_name(s.dtype) + " " + shape_text(s.shape));
        }
        w.encoding = WeightEncoding::mxfp4;
        w.dtype = Dtype::u8;
        w.shard = packed->shard->filename().string();
        w.shape = {m, n};
        w.data = packed->data;
        w.scales = scale->data;
        return w;
      }
    }
    return make_error(Errc::format, "tensor " + name + " is missing from the checkpoint");
  }
  const TensorEntry& e = *main->entry;
  const std::string me = where(name, main->shard);
  w.shard = main->shard->filename().string();
  w.dtype = e.dtype;
  w.shape = e.shape;
  w.data = main->data;
  if (w.shape.empty()) w.shape = {1};
  // `<base>.scale`: DeepSeek-V4.1's companion (UE8M0) of an F8 or packed-E2M1 weight.
  const std::string base = ends_with(name, ".weight") ? name.substr(0, name.size() - 7) : std::string();
  auto ue8m0 = [&](Dtype d) { return d == Dtype::f8_e8m0 || d == Dtype::u8; };
  switch (e.dtype) {
    case Dtype::i8: {
      if (base.empty()) return make_error(Errc::unsupported, me + ": dtype I8 is not supported");
      auto scale = ck.find(base + ".scale");
      if (!scale) {
        return make_error(Errc::format, me + ": I8 (packed E2M1) needs its scale companion " + base +
                                            ".scale, which is missing");
      }
      const std::string sw = where(base + ".scale", scale->shard);
      if (e.shape.size() != 2) {
        return make_error(Errc::format, me + ": packed E2M1 must be 2-D, is " + shape_text(e.shape));
      }
      const std::int64_t m = e.shape[0], n = e.shape[1] * 2;
      if (n % 32 != 0) {
        return make_error(Errc::format, me + ": " + std::to_string(n) + " columns are not a multiple of 32");
      }
      const std::vector<std::int64_t> want{m, n / 32};
      if (!ue8m0(scale->entry->dtype) || scale->entry->shape != want) {
        return make_error(Errc::format, sw + ": MXFP4 scales must be F8_E8M0 or U8 " + shape_text(want) + ", are " +
                                            dtype_name(scale->entry->dtype) + " " + shape_text(scale->entry->shape));
      }
      w.encoding = WeightEncoding::mxfp4;
      w.shape = {m, n};
      w.scales = scale->data;
      return w;
    }
    case Dtype::f32:
    case Dtype::f16:
    case Dtype::bf16:
      return w;
    case Dtype::f8_e4m3:
    case Dtype::f8_e5m2: {
      if (e.shape.size() != 2) return make_error(Errc::format, me + ": F8 weights must be 2-D, shape is " + shape_text(e.shape));
      if (fp8_block.rows <= 0 || fp8_block.cols <= 0) {
        return make_error(Errc::format, me + ": " + dtype_name(e.dtype) +
                                            " needs quantization_config.weight_block_size in config.json (never inferred from shapes)");
      }
      auto scale = ck.find(name + "_scale_inv");
      std::string scale_name = name + "_scale_inv";
      if (!scale && !base.empty()) {
        scale = ck.find(base + ".scale");
        if (scale) {
          scale_name = base + ".scale";
          w.ue8m0_scales = true;
        }
      }
      if (!scale) {
        const std::string alt = base.empty() ? std::string() : " (or " + base + ".scale)";
        return make_error(Errc::format, me + ": its scale companion " + name + "_scale_inv" + alt + " is missing");
      }
      const std::string sw = where(scale_name, scale->shard);
      const std::vector<std::int64_t> want{(e.shape[0] + fp8_block.rows - 1) / fp8_block.rows,
                                           (e.shape[1] + fp8_block.cols - 1) / fp8_block.cols};
      if (w.ue8m0_scales) {
        if (!ue8m0(scale->entry->dtype) || scale->entry->shape != want) {
          return make_error(Errc::format, sw + ": block scales must be F8_E8M0 (or U8) " + shape_text(want) +
                                              " for blocks of " + std::to_string(fp8_block.rows) + "x" +
                                              std::to_string(fp8_block.cols) + ", are " +
                                              dtype_name(scale->entry->dtype) + " " + shape_text(scale->entry->shape));
        }
      } else if (scale->entry->dtype != Dtype::f32 || scale->entry->shape != want) {
        return make_error(Errc::format, sw + ": block scales must be F32 " + shape_text(want) + " for blocks of " +
                                            std::to_string(fp8_block.rows) + "x" + std::to_string(fp8_block.cols) +
                                            ", are " + dtype_name(scale->entry->dtype) + " " + shape_text(scale->entry->shape));
      }
      w.encoding = WeightEncoding::fp8_block;
      w.scales = scale->data;
      w.block_rows = fp8_block.rows;
      w.block_cols = fp8_block.cols;
      return w;
    }
    default:
      return make_error(Errc::unsupported, me + ": dtype " + std::string(dtype_name(e.dtype)) + " is not supported");
  }
}

Status decode_rows(const WeightSource& w, std::int64_t row0, std::int64_t n_rows, std::span<float> out) {
  const std::int64_t cols = w.cols();
  if (row0 < 0 || n_rows < 0 || row0 + n_rows > w.rows() || std::int64_t(out.size()) < n_rows * cols) {
    return make_error(Errc::argument, "decode_rows " + w.name + ": rows " + std::to_string(row0) + "+" +
                                          std::to_string(n_rows) + " outside " + std::to_string(w.rows()));
  }
  float* o = out.data();
  const std::byte* d = w.data.data();
  switch (w.encoding) {
    case WeightEncoding::plain: {
      const std::int64_t first = row0 * cols, n = n_rows * cols;
      if (w.dtype == Dtype::f32) {
        std::memcpy(o, d + first * 4, std::size_t(n) * 4);
      } else if (w.dtype == Dtype::bf16) {
        for (std::int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(load_le<std::uint16_t>(d + (first + i) * 2));
      } else {
        for (std::int64_t i = 0; i < n; ++i) o[i] = f16_to_f32_ieee(load_le<std::uint16_t>(d + (first + i) * 2));
      }
      return {};
    }
    case WeightEncoding::fp8_block: {
      const std::int64_t scale_cols = (cols + w.block_cols - 1) / w.block_cols;
      const bool e4m3 = w.dtype == Dtype::f8_e4m3;
      const std::int64_t sbytes = w.ue8m0_scales ? 1 : 4;
      for (std::int64_t r = 0; r < n_rows; ++r) {
        const std::int64_t row = row0 + r;
        const std::byte* srow = w.scales.data() + (row / w.block_rows) * scale_cols * sbytes;
        const std::byte* qrow = d + row * cols;
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto b = std::to_integer<std::uint8_t>(qrow[c]);
          const float v = e4m3 ? f8_e4m3fn_to_f32(b) : f8_e5m2_to_f32(b);
          const std::byte* sp = srow + (c / w.block_cols) * sbytes;
          const float s = w.ue8m0_scales ? e8m0_to_f32(std::to_integer<std::uint8_t>(*sp)) : load_le<float>(sp);
          o[r * cols + c] = v * s;  // a multiply, despite "inv"
        }
      }
      return {};
    }
    case WeightEncoding::mxfp4: {
      const std::int64_t groups = cols / 32;
      for (std::int64_t r = 0; r < n_rows; ++r) {
        const std::int64_t row = row0 + r;
        const std::byte* prow = d + row * (cols / 2);
        const std::byte* srow = w.scales.data() + row * groups;
        for (std::int64_t c = 0; c < cols; c += 2) {
          const auto b = std::to_integer<std::uint8_t>(prow[c / 2]);
          const float s = e8m0_to_f32(std::to_integer<std::uint8_t>(srow[c / 32]));
          o[r * cols + c] = e2m1_to_f32(b & 0xf) * s;       // low nibble: even column
          o[r * cols + c + 1] = e2m1_to_f32(b >> 4) * s;
        }
      }
      return {};
    }
  }
  return {};
}

}  // namespace waste::convert
