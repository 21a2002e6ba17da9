// DeepSeek-V4.1's checkpoint encodings and the Engram table file: fp8 e4m3 with 32x32 UE8M0
// `.scale` blocks and I8-packed E2M1 experts with UE8M0 per 32 decoded against values worked by
// hand; engram-L{n}.bin's header, page packing, quantization bound, CRC and resume.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "compute/convert/dtype_decode.hpp"
#include "compute/convert/engram_table.hpp"
#include "shared/crc32.hpp"
#include "tests/convert/checkpoint_fixture.hpp"
#include "tests/shared/temp_dir.hpp"

using namespace waste;
using namespace waste::convert;

namespace {

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

std::uint64_t mix(std::uint64_t z) { return test::fixture_mix(z); }

std::vector<float> random_row(int width, std::uint64_t seed, float amp) {
  std::vector<float> r(static_cast<std::size_t>(width));
  for (int i = 0; i < width; ++i) {
    const float u = float(mix(seed * 1000003 + std::uint64_t(i)) >> 40) / 16777216.0f * 2.0f - 1.0f;
    r[std::size_t(i)] = u * amp * (1.0f + float(i % 32) / 8.0f);
  }
  return r;
}

}  // namespace

TEST_CASE("V4.1 fp8 e4m3 with 32x32 UE8M0 .scale blocks decodes exactly", "[convert][dtype][v41]") {
  test::TempDir dir("v41fp8");
  // [40, 64]: scale blocks [2, 2] = 2^0, 2^1 / 2^-2, 2^3 (E8M0 bytes 127, 128, 125, 130).
  std::vector<std::uint8_t> q(40 * 64, 0x38);  // 1.0 everywhere, so a value is its block's scale
  q[0 * 64 + 0] = 0x7E;                        // 448
  q[5 * 64 + 10] = 0x01;                       // 2^-9 (subnormal)
  q[33 * 64 + 1] = 0xC0;                       // -2
  q[39 * 64 + 63] = 0xB4;                      // -0.75
  q[31 * 64 + 33] = 0x00;                      // 0
  auto ck = make(dir, {{"layers.0.attn.wq_a.weight", "F8_E4M3", {40, 64}, q},
                       {"layers.0.attn.wq_a.scale", "F8_E8M0", {2, 2}, {127, 128, 125, 130}}});
  auto w = resolve_weight(ck, "layers.0.attn.wq_a.weight", {32, 32});
  REQUIRE(w);
  CHECK(w->encoding == WeightEncoding::fp8_block);
  CHECK(w->ue8m0_scales);
  const auto v = decode_all(*w);
  const float block[2][2] = {{1.0f, 2.0f}, {0.25f, 8.0f}};
  for (int r = 0; r < 40; ++r) {
    for (int c = 0; c < 64; ++c) {
      float want = block[r / 32][c / 32];
      if (r == 0 && c == 0) want = 448.0f;
      if (r == 5 && c == 10) want = std::ldexp(1.0f, -9);
      if (r == 33 && c == 1) want = -0.5f;
      if (r == 39 && c == 63) want = -6.0f;
      if (r == 31 && c == 33) want = 0.0f;
      INFO("row " << r << " col " << c);
      CHECK(v[std::size_t(r * 64 + c)] == want);
    }
  }
  // The Engram table's layout: one E8M0 per row per 32 columns, read with blocks of 1 x 32.
  auto ck2 = make(dir, {{"layers.1.engram.embed.weight", "F8_E4M3", {3, 64}, std::vector<std::uint8_t>(3 * 64, 0x40)},
                        {"layers.1.engram.embed.scale", "F8_E8M0", {3, 2}, {127, 126, 0x7C, 129, 128, 127}}});
  auto e = resolve_weight(ck2, "layers.1.engram.embed.weight", {1, 32});
  REQUIRE(e);
  const auto ev = decode_all(*e);
  CHECK(ev[0] == 2.0f);        // 0x40 = 2, x 2^0
  CHECK(ev[32] == 1.0f);       // x 2^-1
  CHECK(ev[64] == 0.25f);      // x 2^-3
  CHECK(ev[64 + 63] == 8.0f);  // x 2^2
  CHECK(ev[128 + 5] == 4.0f);
  CHECK(ev[128 + 40] == 2.0f);
  // With the config's 32x32 blocks the same scale tensor is the wrong shape: refused by name.
  auto wrong = resolve_weight(ck2, "layers.1.engram.embed.weight", {32, 32});
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().message ==
        "tensor layers.1.engram.embed.scale (shard model.safetensors): block scales must be "
        "F8_E8M0 (or U8) [1, 2] for blocks of 32x32, are F8_E8M0 [3, 2]");
}

TEST_CASE("V4.1 I8-packed E2M1 experts with UE8M0 .scale decode exactly (low nibble first)", "[convert][dtype][v41]") {
  test::TempDir dir("v41fp4");
  // [2, 64] logical = I8 [2, 32]; scales [2, 2].
  std::vector<std::uint8_t> p(2 * 32, 0x00);
  p[0] = 0x21;        // col 0 = code 1 (0.5), col 1 = code 2 (1.0)
  p[16] = 0x9F;       // col 32 = code 15 (-6), col 33 = code 9 (-0.5)
  p[32 + 31] = 0x7C;  // row 1: col 62 = code 12 (-2), col 63 = code 7 (6)
  p[32 + 3] = 0x85;   // row 1: col 6 = code 5 (3), col 7 = code 8 (-0)
  auto ck = make(dir, {{"layers.0.ffn.experts.3.w1.weight", "I8", {2, 32}, p},
                       {"layers.0.ffn.experts.3.w1.scale", "F8_E8M0", {2, 2}, {127, 130, 126, 125}}});
  auto w = resolve_weight(ck, "layers.0.ffn.experts.3.w1.weight", {32, 32});
  REQUIRE(w);
  CHECK(w->encoding == WeightEncoding::mxfp4);
  CHECK(w->shape == std::vector<std::int64_t>{2, 64});
  const auto v = decode_all(*w);
  CHECK(v[0] == 0.5f);
  CHECK(v[1] == 1.0f);
  CHECK(v[2] == 0.0f);
  CHECK(v[32] == -48.0f);    // -6 x 2^3
  CHECK(v[33] == -4.0f);     // -0.5 x 2^3
  CHECK(v[64 + 6] == 1.5f);  // 3 x 2^-1
  CHECK(v[64 + 7] == 0.0f);
  CHECK(std::signbit(v[64 + 7]));
  CHECK(v[64 + 62] == -0.5f);  // -2 x 2^-2
  CHECK(v[64 + 63] == 1.5f);   // 6 x 2^-2

  // Companion hazards, refused by name before any output.
  auto no_scale = make(dir, {{"layers.0.ffn.experts.3.w2.weight", "I8", {2, 32}, p}});
  auto a = resolve_weight(no_scale, "layers.0.ffn.experts.3.w2.weight", {32, 32});
  REQUIRE_FALSE(a);
  CHECK(a.error().message ==
        "tensor layers.0.ffn.experts.3.w2.weight (shard model.safetensors): I8 (packed E2M1) "
        "needs its scale companion layers.0.ffn.experts.3.w2.scale, which is missing");
  auto bad_shape =
      make(dir, {{"x.weight", "I8", {2, 32}, p}, {"x.scale", "F8_E8M0", {2, 4}, std::vector<std::uint8_t>(8, 127)}});
  auto b = resolve_weight(bad_shape, "x.weight", {32, 32});
  REQUIRE_FALSE(b);
  CHECK(b.error().message ==
        "tensor x.scale (shard model.safetensors): MXFP4 scales must be F8_E8M0 or U8 [2, 2], "
        "are F8_E8M0 [2, 4]");
  auto odd = make(dir, {{"y.weight", "I8", {2, 8}, std::vector<std::uint8_t>(16)}, {"y.scale", "F8_E8M0", {2, 0}, {}}});
  auto d = resolve_weight(odd, "y.weight", {32, 32});
  REQUIRE_FALSE(d);
  CHECK(d.error().message == "tensor y.weight (shard model.safetensors): 16 columns are not a multiple of 32");
  auto plain_i8 = make(dir, {{"z", "I8", {4}, std::vector<std::uint8_t>(4)}});
  auto z = resolve_weight(plain_i8, "z", {32, 32});
  REQUIRE_FALSE(z);
  CHECK(z.error().message == "tensor z (shard model.safetensors): dtype I8 is not supported");
  auto f8_missing = make(dir, {{"q.weight", "F8_E4M3", {32, 32}, std::vector<std::uint8_t>(1024)}});
  auto m = resolve_weight(f8_missing, "q.weight", {32, 32});
  REQUIRE_FALSE(m);
  CHECK(m.error().message ==
        "tensor q.weight (shard model.safetensors): its scale companion q.weight_scale_inv (or "
        "q.scale) is missing");
}

TEST_CASE("engram table header: sizes, page packing and parse hazards", "[convert][engram][v41]") {
  EngramTableHeader h;
  h.bits = 8;
  h.width = 256;
  h.rows = 31;
  h.layer = 14;
  CHECK(h.row_bytes() == 272);
  CHECK(h.rows_per_page() == 15);
  CHECK(h.page_bytes() == 4096);
  CHECK(h.data_bytes() == 3 * 4096);
  CHECK(h.row_offset(0) == 4096);
  CHECK(h.row_offset(14) == 4096 + 14 * 272);
  CHECK(h.row_offset(15) == 2 * 4096);
  CHECK(h.row_offset(30) == 3 * 4096);
  h.bits = 4;
  CHECK(h.row_bytes() == 144);
  CHECK(h.rows_per_page() == 28);
  CHECK(h.data_bytes() == 2 * 4096);
  // The released tables: 384,006,168 rows -> 25,600,412 pages at 8 bits, 13,714,506 at 4.
  h.rows = 384006168;
  CHECK(h.data_bytes() == 13714506ull * 4096);
  h.bits = 8;
  CHECK(h.data_bytes() == 25600412ull * 4096);
  // A row wider than a page takes whole pages.
  h.width = 8192;
  CHECK(h.row_bytes() == 8704);
  CHECK(h.rows_per_page() == 1);
  CHECK(h.page_bytes() == 12288);
  h.width = 256;
  h.rows = 31;
  h.data_crc = 0xDEADBEEF;

  auto bytes = encode_engram_header(h);
  CHECK(std::memcmp(bytes.data(), "WENGRAM\0", 8) == 0);
  auto back = parse_engram_header(bytes, "t.bin");
  REQUIRE(back);
  CHECK(back->bits == 8);
  CHECK(back->rows == 31);
  CHECK(back->width == 256);
  CHECK(back->layer == 14);
  CHECK(back->data_crc == 0xDEADBEEF);

  auto damaged = bytes;
  damaged[20] ^= std::byte{1};
  CHECK(parse_engram_header(damaged, "t.bin").error().message == "t.bin: header CRC mismatch (damaged header)");
  auto magic = bytes;
  magic[0] = std::byte{'X'};
  CHECK(parse_engram_header(magic, "t.bin").error().message == "t.bin: not an engram table (bad magic)");
  CHECK(parse_engram_header(std::span(bytes.data(), 10), "t.bin").error().message ==
        "t.bin: 10 bytes, too short for an engram table header");
  // A well-formed header with a width that is not a multiple of 32: refused by the checks.
  EngramTableHeader odd = h;
  odd.width = 100;
  CHECK(check_engram_header(odd).error().message == "engram table: width 100 is not a multiple of 32 in 32..65536");
  odd = h;
  odd.bits = 6;
  CHECK(check_engram_header(odd).error().message == "engram table: bits 6 is not 4 or 8");
}

TEST_CASE("engram rows quantize within the bound and by hand", "[convert][engram][v41]") {
  // By hand: amax 127 gives scale 1 (8 bits), integers come back exactly; 4 bits: amax 7.
  std::vector<float> row(32, 0.0f);
  row[0] = 127.0f;
  row[1] = -5.0f;
  row[2] = 2.5f;  // half to even: 2
  std::vector<std::byte> out(2 + 32);
  REQUIRE(quantize_engram_row(8, row, out));
  std::uint16_t s16;
  std::memcpy(&s16, out.data(), 2);
  CHECK(s16 == 0x3C00);  // fp16 1.0
  CHECK(std::int8_t(out[2]) == 127);
  CHECK(std::int8_t(out[3]) == -5);
  CHECK(std::int8_t(out[4]) == 2);
  std::vector<float> back(32);
  dequantize_engram_row(8, out, back);
  CHECK(back[0] == 127.0f);
  CHECK(back[1] == -5.0f);
  CHECK(back[2] == 2.0f);
  std::vector<float> r4(32, 0.0f);
  r4[0] = 7.0f;
  r4[1] = -6.5f;  // half to even: -6
  r4[2] = 3.5f;   // half to even: 4
  r4[3] = -2.5f;  // -2
  std::vector<std::byte> o4(2 + 16);
  REQUIRE(quantize_engram_row(4, r4, o4));
  CHECK(std::to_integer<int>(o4[2]) == ((-6 + 8) << 4 | (7 + 8)));
  CHECK(std::to_integer<int>(o4[3]) == ((-2 + 8) << 4 | (4 + 8)));
  dequantize_engram_row(4, o4, back);
  CHECK(back[0] == 7.0f);
  CHECK(back[1] == -6.0f);
  CHECK(back[2] == 4.0f);
  CHECK(back[3] == -2.0f);
  // Refusals.
  row[5] = std::nanf("");
  CHECK(quantize_engram_row(8, row, out).error().message == "column 5 is not finite");
  row[5] = 1e7f;
  CHECK(quantize_engram_row(8, row, out).error().message ==
        "columns 0..31: amax 10000000.000000 needs a scale beyond fp16");

  // Random rows: |x - x'| <= scale / 2 per element plus the fp16 rounding of the scale.
  for (int bits : {4, 8}) {
    const int qmax = bits == 8 ? 127 : 7;
    double worst = 0;
    for (int r = 0; r < 50; ++r) {
      auto x = random_row(256, std::uint64_t(r + bits * 100), 0.01f * float(r + 1));
      std::vector<std::byte> q(256 / 32 * 2 + 256 * bits / 8);
      REQUIRE(quantize_engram_row(bits, x, q));
      std::vector<float> y(256);
      dequantize_engram_row(bits, q, y);
      for (int g = 0; g < 8; ++g) {
        float amax = 0;
        for (int i = g * 32; i < g * 32 + 32; ++i) amax = std::max(amax, std::fabs(x[std::size_t(i)]));
        const double bound = double(amax) / qmax / 2 * (1 + 1.0 / 1024) + double(amax) / 1024;
        for (int i = g * 32; i < g * 32 + 32; ++i) {
          const double err = std::fabs(double(x[std::size_t(i)]) - double(y[std::size_t(i)]));
          worst = std::max(worst, err / (double(amax) / qmax));
          REQUIRE(err <= bound);
        }
      }
    }
    INFO("bits " << bits << ": worst error " << worst << " scales");
    CHECK(worst <= 0.51);
  }
}

TEST_CASE("engram table file: rows round-trip, CRC, and a resumed write is byte-identical", "[convert][engram][v41]") {
  test::TempDir dir("v41engram");
  EngramTableHeader h;
  h.bits = 8;
  h.width = 64;  // row 4 + 64 = 68 bytes, 60 a page
  h.rows = 130;
  h.layer = 1;
  REQUIRE(h.row_bytes() == 68);
  REQUIRE(h.rows_per_page() == 60);
  std::vector<std::vector<float>> rows;
  for (std::uint64_t r = 0; r < h.rows; ++r) rows.push_back(random_row(64, r, 0.5f));

  const auto whole = dir.path() / "whole.bin";
  {
    auto w = EngramTableWriter::open(whole, h, 0, 0);
    REQUIRE(w);
    for (const auto& r : rows) REQUIRE(w->append(r));
    REQUIRE(w->finish());
  }
  auto rd = EngramTableReader::open(whole);
  REQUIRE(rd);
  CHECK(rd->header().rows == 130);
  CHECK(std::filesystem::file_size(whole) == 4096 + 3 * 4096);
  auto crc = rd->data_crc();
  REQUIRE(crc);
  CHECK(*crc == rd->header().data_crc);
  std::vector<float> y(64);
  for (std::uint64_t r : {0ull, 59ull, 60ull, 129ull}) {
    REQUIRE(rd->read_row(r, y));
    for (int g = 0; g < 2; ++g) {
      float amax = 0;
      for (int i = g * 32; i < g * 32 + 32; ++i) amax = std::max(amax, std::fabs(rows[r][std::size_t(i)]));
      for (int i = g * 32; i < g * 32 + 32; ++i) {
        CHECK(std::fabs(y[std::size_t(i)] - rows[r][std::size_t(i)]) <= amax / 127.0f * 0.51f);
      }
    }
  }
  CHECK(rd->read_row(130, y).error().message == whole.string() + ": row 130 of 130");

  // Interrupted after one page (60 rows), resumed from the recorded row count and CRC.
  const auto part = dir.path() / "part.bin";
  std::uint32_t crc60 = 0;
  {
    auto w = EngramTableWriter::open(part, h, 0, 0);
    REQUIRE(w);
    for (int r = 0; r < 65; ++r) REQUIRE(w->append(rows[std::size_t(r)]));  // 5 rows past the page: lost
    REQUIRE(w->sync());
    crc60 = w->crc();  // the CRC of the one flushed page
  }
  CHECK_FALSE(EngramTableReader::open(part));  // unfinished: the header is still zero
  auto bad = EngramTableWriter::open(part, h, 61, crc60);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == part.string() + ": cannot resume at row 61 (not a page boundary of 60 rows)");
  {
    auto w = EngramTableWriter::open(part, h, 60, crc60);
    REQUIRE(w);
    for (std::size_t r = 60; r < rows.size(); ++r) REQUIRE(w->append(rows[r]));
    REQUIRE(w->finish());
  }
  CHECK(test::read_file(part) == test::read_file(whole));
}
