// Every dtype decoder byte for byte on hand-made tensors, and the companion checks that must
// stop a conversion before any output (hazard: a silently wrong weight, or a wrong block size).
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>

#include "compute/convert/dtype_decode.hpp"
#include "tests/convert/checkpoint_fixture.hpp"
#include "tests/shared/temp_dir.hpp"

using namespace waste;
using namespace waste::convert;

namespace {

std::vector<std::uint8_t> f32_bytes(std::vector<float> v) {
  std::vector<std::uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Checkpoint make(const test::TempDir& dir, const std::vector<test::StTensor>& tensors) {
  test::write_file(dir.path() / "model.safetensors", test::safetensors_bytes(tensors));
  auto ck = Checkpoint::open(dir.path());
  REQUIRE(ck.has_value());
  return std::move(*ck);
}

std::vector<float> decode_all(const WeightSource& w) {
  std::vector<float> out(std::size_t(w.rows() * w.cols()));
  REQUIRE(decode_rows(w, 0, w.rows(), out).has_value());
  return out;
}

}  // namespace

TEST_CASE("bf16 and f16 decode exactly, f16 keeps inf, NaN and subnormals", "[convert][dtype]") {
  CHECK(bf16_to_f32(0x3F80) == 1.0f);
  CHECK(bf16_to_f32(0xC040) == -3.0f);
  CHECK(bf16_to_f32(0x0001) == std::ldexp(1.0f, -133));
  CHECK(std::isinf(bf16_to_f32(0x7F80)));
  CHECK(f16_to_f32_ieee(0x3C00) == 1.0f);
  CHECK(f16_to_f32_ieee(0xC500) == -5.0f);
  CHECK(f16_to_f32_ieee(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16_to_f32_ieee(0x7BFF) == 65504.0f);
  CHECK(std::isinf(f16_to_f32_ieee(0x7C00)));
  CHECK(std::isnan(f16_to_f32_ieee(0x7E00)));
  CHECK(std::signbit(f16_to_f32_ieee(0x8000)));
}

TEST_CASE("F8_E4M3 (FN) decodes all 256 codes: bias 7, subnormals, no inf, 0x7F/0xFF NaN", "[convert][dtype]") {
  CHECK(f8_e4m3fn_to_f32(0x7E) == 448.0f);
  CHECK(f8_e4m3fn_to_f32(0x01) == std::ldexp(1.0f, -9));
  CHECK(f8_e4m3fn_to_f32(0x08) == std::ldexp(1.0f, -6));
  CHECK(f8_e4m3fn_to_f32(0x38) == 1.0f);
  CHECK(f8_e4m3fn_to_f32(0xB8) == -1.0f);
  CHECK(f8_e4m3fn_to_f32(0x78) == 256.0f);  // exponent 15 with m < 7 is an ordinary value
  for (int b = 0; b < 256; ++b) {
    const float v = f8_e4m3fn_to_f32(std::uint8_t(b));
    const int e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) {
      CHECK(std::isnan(v));
      continue;
    }
    const double mag = e == 0 ? m * std::ldexp(1.0, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
    CHECK(double(v) == ((b & 0x80) ? -mag : mag));
  }
}

TEST_CASE("F8_E5M2 is the top byte of an IEEE half", "[convert][dtype]") {
  CHECK(f8_e5m2_to_f32(0x3C) == 1.0f);
  CHECK(f8_e5m2_to_f32(0x7B) == 57344.0f);
  CHECK(f8_e5m2_to_f32(0x01) == std::ldexp(1.0f, -16));
  CHECK(std::isinf(f8_e5m2_to_f32(0x7C)));
  CHECK(std::isnan(f8_e5m2_to_f32(0x7D)));
}

TEST_CASE("E2M1 and E8M0 decode the MX code tables", "[convert][dtype]") {
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int i = 0; i < 16; ++i) CHECK(e2m1_to_f32(std::uint8_t(i)) == want[i]);
  CHECK(std::signbit(e2m1_to_f32(8)));
  CHECK(e8m0_to_f32(127) == 1.0f);
  CHECK(e8m0_to_f32(130) == 8.0f);
  CHECK(e8m0_to_f32(0) == std::ldexp(1.0f, -127));
  CHECK(e8m0_to_f32(254) == std::ldexp(1.0f, 127));
  CHECK(std::isnan(e8m0_to_f32(255)));
}

TEST_CASE("plain F32, F16 and BF16 tensors decode row by row", "[convert][dtype]") {
  test::TempDir dir("dt-plain");
  auto ck = make(dir, {{"f", "F32", {2, 2}, f32_bytes({1, -2, 3.5f, 0.25f})},
                       {"h", "F16", {1, 3}, {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00}},
                       {"b", "BF16", {3}, {0x80, 0x3F, 0x40, 0xC0, 0x00, 0x00}}});
  auto f = resolve_weight(ck, "f", {});
  REQUIRE(f.has_value());
  std::vector<float> row(2);
  REQUIRE(decode_rows(*f, 1, 1, row).has_value());
  CHECK(row == std::vector<float>{3.5f, 0.25f});
  auto h = resolve_weight(ck, "h", {});
  REQUIRE(h.has_value());
  CHECK(decode_all(*h) == std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24)});
  auto b = resolve_weight(ck, "b", {});
  REQUIRE(b.has_value());
  CHECK(decode_all(*b) == std::vector<float>{1.0f, -3.0f, 0.0f});
  CHECK(decode_rows(*f, 2, 1, row).error().message == "decode_rows f: rows 2+1 outside 2");
}

TEST_CASE("F8 weights multiply each element by its block's weight_scale_inv, partial edge blocks included",
          "[convert][dtype]") {
  test::TempDir dir("dt-fp8");
  // 3 x 5 weight in blocks of 2 x 4: scale grid [2, 2]; the last block row and column are partial.
  std::vector<std::uint8_t> q(15);
  for (int i = 0; i < 15; ++i) q[std::size_t(i)] = std::uint8_t(0x38 + (i % 3) * 8);  // 1, 2, 4
  auto ck = make(dir, {{"w.weight", "F8_E4M3", {3, 5}, q},
                       {"w.weight_scale_inv", "F32", {2, 2}, f32_bytes({0.5f, 3.0f, 10.0f, -1.0f})}});
  auto w = resolve_weight(ck, "w.weight", {2, 4});
  REQUIRE(w.has_value());
  CHECK(w->encoding == WeightEncoding::fp8_block);
  const auto out = decode_all(*w);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 5; ++c) {
      const float base = float(1 << ((r * 5 + c) % 3));
      const float scale = std::vector<float>{0.5f, 3.0f, 10.0f, -1.0f}[std::size_t((r / 2) * 2 + c / 4)];
      CHECK(out[std::size_t(r * 5 + c)] == base * scale);
    }
  }
  // The block size comes from the config only: the same file with 3 x 5 blocks has a misshaped scale.
  auto wrong = resolve_weight(ck, "w.weight", {3, 5});
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().message ==
        "tensor w.weight_scale_inv (shard model.safetensors): block scales must be F32 [1, 1] for blocks of 3x5, are F32 [2, 2]");
  auto none = resolve_weight(ck, "w.weight", {});
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().message ==
        "tensor w.weight (shard model.safetensors): F8_E4M3 needs quantization_config.weight_block_size in config.json (never inferred from shapes)");
}

TEST_CASE("an F8 weight without its scale companion is refused, naming tensor and shard", "[convert][dtype]") {
  test::TempDir dir("dt-fp8-missing");
  auto ck = make(dir, {{"w.weight", "F8_E5M2", {1, 2}, {0x3C, 0x40}}});
  auto w = resolve_weight(ck, "w.weight", {128, 128});
  REQUIRE_FALSE(w.has_value());
  CHECK(w.error().message ==
        "tensor w.weight (shard model.safetensors): its scale companion w.weight_scale_inv (or w.scale) is missing");
}

TEST_CASE("MXFP4 pairs decode low nibble first with one E8M0 scale per 32 inputs", "[convert][dtype]") {
  test::TempDir dir("dt-mxfp4");
  // 2 rows x 64 columns: 32 packed bytes per row, 2 scales per row.
  std::vector<std::uint8_t> packed(64), scales{127, 128, 126, 0};
  for (int i = 0; i < 64; ++i) packed[std::size_t(i)] = std::uint8_t((i % 16) | (((i + 5) % 16) << 4));
  auto ck = make(dir, {{"e.weight_packed", "U8", {2, 32}, packed}, {"e.weight_scale", "U8", {2, 2}, scales}});
  auto w = resolve_weight(ck, "e.weight", {});
  REQUIRE(w.has_value());
  CHECK(w->encoding == WeightEncoding::mxfp4);
  CHECK(w->shape == std::vector<std::int64_t>{2, 64});
  const auto out = decode_all(*w);
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 64; ++c) {
      const std::uint8_t byte = packed[std::size_t(r * 32 + c / 2)];
      const std::uint8_t nib = (c % 2 == 0) ? (byte & 15) : (byte >> 4);
      const float s = e8m0_to_f32(scales[std::size_t(r * 2 + c / 32)]);
      CHECK(out[std::size_t(r * 64 + c)] == e2m1_to_f32(nib) * s);
    }
  }
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == e2m1_to_f32(5));  // high nibble of byte 0 = 5 -> 3.0
  CHECK(out[1] == 3.0f);
}

TEST_CASE("MXFP4 data without its scale, or with misshaped scales, is refused", "[convert][dtype]") {
  test::TempDir dir("dt-mxfp4-bad");
  auto ck = make(dir, {{"a.weight_packed", "U8", {1, 16}, std::vector<std::uint8_t>(16)},
                       {"b.weight_packed", "U8", {1, 16}, std::vector<std::uint8_t>(16)},
                       {"b.weight_scale", "U8", {1, 2}, {1, 2}}});
  auto a = resolve_weight(ck, "a.weight", {});
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error().message == "tensor a.weight_packed (shard model.safetensors): its scale companion a.weight_scale is missing");
  auto b = resolve_weight(ck, "b.weight", {});
  REQUIRE_FALSE(b.has_value());
  CHECK(b.error().message == "tensor b.weight_scale (shard model.safetensors): MXFP4 scales must be U8 [1, 1], are U8 [1, 2]");
  auto c = resolve_weight(ck, "c.weight", {});
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().message == "tensor c.weight is missing from the checkpoint");
}

TEST_CASE("an unsupported dtype is refused with tensor and shard", "[convert][dtype]") {
  test::TempDir dir("dt-unknown");
  auto ck = make(dir, {{"x", "I32", {1}, {1, 0, 0, 0}}});
  auto x = resolve_weight(ck, "x", {});
  REQUIRE_FALSE(x.has_value());
  CHECK(x.error().message == "tensor x (shard model.safetensors): dtype I32 is not supported");
}
