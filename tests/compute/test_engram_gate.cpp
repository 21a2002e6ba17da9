// DeepSeek-V4.1's Engram forward half (compute/engram/engram_gate.*, engram_row.*): table rows
// decoded byte for byte in each storage form, the gate worked by hand (signed sqrt, the 1e-6
// floor, per-stream normalisation), image tokens untouched, and the shape errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "compute/engram/engram_gate.hpp"
#include "compute/engram/engram_row.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "shared/container/engram_table.hpp"

using namespace waste;
using engram::EngramRowFormat;

namespace {

std::vector<float> decode(EngramRowFormat f, const std::vector<std::uint8_t>& row, int width) {
  std::vector<float> out(std::size_t(width), -1.0f);
  auto st = engram::engram_dequantize_row(f, row, out);
  REQUIRE(st);
  return out;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

TEST_CASE("Engram row sizes: 264, 272 and 144 bytes at the released width 256", "[compute][engram]") {
  CHECK(*engram::engram_row_bytes(EngramRowFormat::f8_e8m0, 256) == 264);
  CHECK(*engram::engram_row_bytes(EngramRowFormat::q8, 256) == 272);
  CHECK(*engram::engram_row_bytes(EngramRowFormat::q4, 256) == 144);
  CHECK(*engram::engram_row_bytes(EngramRowFormat::q4, 32) == 18);
  CHECK(engram::engram_row_bytes(EngramRowFormat::q8, 100).error().message ==
        "engram row width 100 is not a positive multiple of 32");
  CHECK(engram::engram_row_bytes(EngramRowFormat::q8, 0).error().code == Errc::format);
  std::vector<float> out(256);
  const std::vector<std::uint8_t> short_row(143);
  CHECK(engram::engram_dequantize_row(EngramRowFormat::q4, short_row, out).error().message ==
        "engram q4 row of width 256: 143 bytes, expected 144");
  std::vector<float> odd(40);
  CHECK(engram::engram_dequantize_row(EngramRowFormat::f8_e8m0, std::vector<std::uint8_t>(41), odd).error().message ==
        "engram row width 40 is not a positive multiple of 32");
}

TEST_CASE("Engram f8_e8m0 rows: E4M3 codes times 2^(e-127) per 32 columns, as the release stores them",
          "[compute][engram]") {
  std::vector<std::uint8_t> row(64 + 2, 0x00);
  row[0] = 0x38;   // 1.0
  row[1] = 0xB8;   // -1.0
  row[2] = 0x01;   // 2^-9, the smallest subnormal
  row[3] = 0x7E;   // 448, the largest finite
  row[4] = 0x7F;   // NaN
  row[5] = 0x3C;   // 1.5
  row[31] = 0x80;  // -0
  row[32] = 0x38;
  row[33] = 0x44;  // 3.0
  row[64] = 127;   // columns 0..31: 2^0
  row[65] = 120;   // columns 32..63: 2^-7
  const auto v = decode(EngramRowFormat::f8_e8m0, row, 64);
  CHECK(v[0] == 1.0f);
  CHECK(v[1] == -1.0f);
  CHECK(v[2] == std::ldexp(1.0f, -9));
  CHECK(v[3] == 448.0f);
  CHECK(std::isnan(v[4]));
  CHECK(v[5] == 1.5f);
  CHECK(v[6] == 0.0f);
  CHECK(std::signbit(v[31]));
  CHECK(v[32] == std::ldexp(1.0f, -7));
  CHECK(v[33] == 3.0f * std::ldexp(1.0f, -7));
  // The E8M0 NaN scale makes its whole group NaN; 0 is 2^-127 (exact in f32 times an E4M3 value).
  row[64] = 255;
  row[65] = 0;
  const auto w = decode(EngramRowFormat::f8_e8m0, row, 64);
  CHECK(std::isnan(w[0]));
  CHECK(std::isnan(w[6]));
  CHECK(w[32] == std::ldexp(1.0f, -127));
  CHECK(w[33] == std::ldexp(3.0f, -127));
}

TEST_CASE("Engram q8 / q4 rows: the engram-L{n}.bin rows, an fp16 scale per 32 columns, then the codes",
          "[compute][engram]") {
  // q8, width 64: two little-endian halves (0.5 = 0x3800, -2 = 0xC000), then the codes.
  std::vector<std::uint8_t> q8(4 + 64, 0);
  q8[0] = 0x00;
  q8[1] = 0x38;
  q8[2] = 0x00;
  q8[3] = 0xC0;
  q8[4 + 0] = 0xFD;   // -3
  q8[4 + 1] = 0x7F;   // 127
  q8[4 + 2] = 0x80;   // -128
  q8[4 + 40] = 0x05;  // 5, second group
  const auto a = decode(EngramRowFormat::q8, q8, 64);
  CHECK(a[0] == -1.5f);
  CHECK(a[1] == 63.5f);
  CHECK(a[2] == -64.0f);
  CHECK(a[3] == 0.0f);
  CHECK(a[40] == -10.0f);
  // q4, width 64: the halves 2.0 (0x4000) and a subnormal 2^-24 (0x0001) (subnormal scales are
  // kept), then 32 bytes of nibbles (low = even column, value nibble - 8).
  std::vector<std::uint8_t> q4(4 + 32, 0x88);  // all zeros
  q4[0] = 0x00;
  q4[1] = 0x40;
  q4[2] = 0x01;
  q4[3] = 0x00;
  q4[4 + 0] = 0x1F;   // columns 0, 1: 15 - 8 = 7, 1 - 8 = -7
  q4[4 + 16] = 0x90;  // columns 32, 33: -8, 1
  const auto b = decode(EngramRowFormat::q4, q4, 64);
  CHECK(b[0] == 14.0f);
  CHECK(b[1] == -14.0f);
  CHECK(b[2] == 0.0f);
  CHECK(b[32] == -8.0f * std::ldexp(1.0f, -24));
  CHECK(b[33] == std::ldexp(1.0f, -24));
  // The same bytes through the table's decoder (shared/container/engram_table.hpp): one decoder.
  std::vector<float> t8(64), t4(64);
  dequantize_engram_row(8, std::as_bytes(std::span(q8)), t8);
  dequantize_engram_row(4, std::as_bytes(std::span(q4)), t4);
  CHECK(std::memcmp(t8.data(), a.data(), 64 * sizeof(float)) == 0);
  CHECK(std::memcmp(t4.data(), b.data(), 64 * sizeof(float)) == 0);
}

TEST_CASE("Engram gate: signed sqrt of the normalised dot, per stream, then h += gate * value", "[compute][engram]") {
  ThreadPool pool(1);
  const forward::Exec exec{pool, kernels::generic()};
  // hc 2, hidden 2, one row of 2: wkv [3 * 2][2] gives key0 = (r0, 0), key1 = (0, r1) and value =
  // (r0 + r1, r0 - r1).
  auto shape = engram::EngramGateShape::make(2, 2, 1, 2, 1e-20f);
  REQUIRE(shape);
  const std::vector<float> wkv = {1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, -1};
  const kernels::QuantMatrix m{reinterpret_cast<const std::uint8_t*>(wkv.data()), nullptr, 6, 2, 8, 128, 0};
  const std::vector<float> q = {1.0f, 1.0f, 2.0f, 1.0f}, k = {1.0f, 1.0f, 0.5f, 1.0f};  // qk = 1 everywhere
  auto w = engram::EngramGateWeights::bind(*shape, m, q, k);
  REQUIRE(w);
  engram::EngramGateScratch s;
  s.resize(*shape);
  const float rows[2] = {2.0f, -4.0f};
  float h[4] = {3.0f, 4.0f, 1.0f, -1.0f};
  float gates[2];
  engram::engram_gate_apply(exec, *shape, *w, rows, true, h, s, gates);
  // Stream 0: key (2, 0), dot = 3*2 / (sqrt(12.5) sqrt(2)) / sqrt(2) = 3 / sqrt(12.5) > 0.
  const double d0 = 3.0 / std::sqrt(12.5);
  const double g0 = sigmoid(std::sqrt(d0));
  // Stream 1: key (0, -4), dot = (-1)(-4) / (1 * sqrt(8)) / sqrt(2) = 1; stream 1 is normalised
  // alone (its own rstd), not with stream 0.
  const double g1 = sigmoid(1.0);
  CHECK(gates[0] == Approx(g0).epsilon(1e-6));
  CHECK(gates[1] == Approx(g1).epsilon(1e-6));
  // value = (2 - 4, 2 + 4) = (-2, 6)
  CHECK(h[0] == Approx(3.0 - 2.0 * g0).epsilon(1e-6));
  CHECK(h[1] == Approx(4.0 + 6.0 * g0).epsilon(1e-6));
  CHECK(h[2] == Approx(1.0 - 2.0 * g1).epsilon(1e-6));
  CHECK(h[3] == Approx(-1.0 + 6.0 * g1).epsilon(1e-6));

  // A negative dot: the sign survives the sqrt (gate below 1/2).
  float neg[4] = {-3.0f, 4.0f, 1.0f, -1.0f};
  engram::engram_gate_apply(exec, *shape, *w, rows, true, neg, s, gates);
  CHECK(gates[0] == Approx(sigmoid(-std::sqrt(d0))).epsilon(1e-6));

  // A zero stream: dot 0 takes the 1e-6 floor, gate sigmoid(+1e-3), and the value is added.
  float zero[4] = {0.0f, 0.0f, 1.0f, -1.0f};
  engram::engram_gate_apply(exec, *shape, *w, rows, true, zero, s, gates);
  CHECK(gates[0] == Approx(sigmoid(1e-3)).epsilon(1e-7));
  CHECK(zero[0] == Approx(-2.0 * sigmoid(1e-3)).epsilon(1e-6));

  // An image-span token: gates 0, the streams keep their bits (the rows are not read).
  float img[4] = {3.0f, 4.0f, 1.0f, -1.0f};
  const float before[4] = {3.0f, 4.0f, 1.0f, -1.0f};
  engram::engram_gate_apply(exec, *shape, *w, nullptr, false, img, s, gates);
  CHECK(gates[0] == 0.0f);
  CHECK(gates[1] == 0.0f);
  CHECK(std::memcmp(img, before, sizeof img) == 0);
}

TEST_CASE("Engram gate shape and weight errors name the thing", "[compute][engram]") {
  CHECK(engram::EngramGateShape::make(4, 0, 24, 256, 1e-20f).error().message ==
        "engram gate: hidden 0 is not positive");
  CHECK(engram::EngramGateShape::make(17, 8, 24, 256, 1e-20f).error().message == "engram gate: hc 17 is above 16");
  auto shape = engram::EngramGateShape::make(4, 8, 24, 256, 1e-20f);
  REQUIRE(shape);
  CHECK(shape->in_dim() == 6144);
  CHECK(shape->out_dim() == 40);
  std::vector<float> wkv(40 * 6144, 0.0f), qk(32, 1.0f);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(wkv.data());
  const kernels::QuantMatrix bad{bytes, nullptr, 32, 6144, 6144 * 4, 128, 0};
  CHECK(engram::EngramGateWeights::bind(*shape, bad, qk, qk).error().message ==
        "engram wkv: [32 x 6144], expected [40 x 6144]");
  const kernels::QuantMatrix good{bytes, nullptr, 40, 6144, 6144 * 4, 128, 0};
  CHECK(engram::EngramGateWeights::bind(*shape, good, std::vector<float>(31), qk).error().message ==
        "engram q_weight / k_weight: 31 and 32 floats, expected 32 each");
  CHECK(engram::EngramGateWeights::bind(*shape, good, qk, qk));
}
