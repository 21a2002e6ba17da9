// The RVQ encoder: SIMD nearest search equal to the scalar reference (ties included), k-means
// independent of the thread count, the trunk quantiser's bytes on a hand-made row.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "compute/convert/expert_encode.hpp"
#include "compute/convert/rvq.hpp"
#include "compute/convert/trunk_quant.hpp"
#include "shared/fp16.hpp"

using namespace waste;
using namespace waste::convert;

namespace {
std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = (float(rng.next() >> 40) / 16777216.0f * 2 - 1) * scale;
  return v;
}
}  // namespace

TEST_CASE("SIMD nearest-centroid search equals the scalar reference, first minimum on ties", "[convert][rvq]") {
  const int entries = 256;
  auto book = random_floats(std::size_t(entries) * kVecDim, 1);
  // Duplicate centroids 17 -> 200 and 3 -> 250: equal distances, the lower index must win.
  for (int d = 0; d < kVecDim; ++d) {
    book[std::size_t(200) * kVecDim + d] = book[std::size_t(17) * kVecDim + d];
    book[std::size_t(250) * kVecDim + d] = book[std::size_t(3) * kVecDim + d];
  }
  std::vector<float> norms(entries);
  centroid_norms(book.data(), entries, norms.data());
  const int n = 4099;  // not a multiple of 8: the tail takes the scalar path
  auto xs = random_floats(std::size_t(n) * kVecDim, 2);
  // Points placed exactly on the duplicated centroids.
  for (int d = 0; d < kVecDim; ++d) {
    xs[std::size_t(5) * kVecDim + d] = book[std::size_t(17) * kVecDim + d];
    xs[std::size_t(6) * kVecDim + d] = book[std::size_t(3) * kVecDim + d];
  }
  std::vector<std::int32_t> simd(n), scalar(n);
  nearest_many(xs.data(), n, book.data(), norms.data(), entries, simd.data(), true);
  nearest_many(xs.data(), n, book.data(), norms.data(), entries, scalar.data(), false);
  CHECK(simd == scalar);
  CHECK(simd[5] == 17);
  CHECK(simd[6] == 3);
  for (int i = 0; i < 64; ++i) CHECK(scalar[std::size_t(i)] == nearest_scalar(&xs[std::size_t(i) * kVecDim], book.data(), norms.data(), entries));
  INFO("simd path available: " << simd_available());
}

TEST_CASE("residual k-means gives the same books for 1 and 3 threads", "[convert][rvq]") {
  RvqParams p;
  p.stages = 2;
  p.entries = 64;
  p.iterations = 4;
  auto data = random_floats(20000 * kVecDim, 3);
  auto a = data, b = data;
  ThreadPool one(1), three(3);
  auto c = data;
  RvqBooks ba = train_rvq(a, p, one);
  RvqBooks bb = train_rvq(b, p, three);
  p.simd = false;
  RvqBooks bc = train_rvq(c, p, three);
  CHECK(ba.fp16 == bb.fp16);
  CHECK(ba.fp16 == bc.fp16);
  CHECK(a == b);  // residuals too
  CHECK(a == c);
  // Training lowers the error: the second stage's residual is smaller than the input.
  double in = 0, out = 0;
  for (std::size_t i = 0; i < data.size(); ++i) {
    in += double(data[i]) * data[i];
    out += double(a[i]) * a[i];
  }
  CHECK(out < 0.5 * in);
}

TEST_CASE("greedy residual encoding picks, per stage, the nearest centroid of the residual", "[convert][rvq]") {
  RvqBooks books;
  books.stages = 2;
  books.entries = 8;
  std::vector<float> s0(8 * kVecDim, 0.0f), s1(8 * kVecDim, 0.0f);
  for (int e = 0; e < 8; ++e) {
    s0[std::size_t(e) * kVecDim] = float(e);          // stage 0: e along dimension 0
    s1[std::size_t(e) * kVecDim + 1] = 0.25f * float(e);  // stage 1: along dimension 1
  }
  books.set_stage(0, s0);
  books.set_stage(1, s1);
  const float x[kVecDim] = {3.1f, 0.5f, 0, 0, 0, 0, 0, 0};
  std::vector<float> scratch;
  std::uint8_t ids[2] = {};
  encode_vectors(books, x, 1, ids, false, scratch);
  CHECK(int(ids[0]) == 3);
  CHECK(int(ids[1]) == 2);
  // Nine copies: eight through the SIMD path, one through the scalar tail.
  std::vector<float> xs9;
  for (int i = 0; i < 9; ++i) xs9.insert(xs9.end(), x, x + kVecDim);
  std::uint8_t ids9[18] = {};
  encode_vectors(books, xs9.data(), 9, ids9, true, scratch);
  for (int i = 0; i < 9; ++i) {
    CHECK(int(ids9[2 * i]) == 3);
    CHECK(int(ids9[2 * i + 1]) == 2);
  }
}

TEST_CASE("the training sampler takes every 12th-ish expert and at most the cap", "[convert][rvq]") {
  CHECK(sampled_experts(8, 12) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(sampled_experts(256, 12) == std::vector<int>{0, 21, 42, 63, 84, 105, 126, 147, 168, 189, 210, 231});
  std::vector<float> v = random_floats(100 * kVecDim, 4);
  cap_training_set(v, 30);
  CHECK(v.size() == 30 * kVecDim);
}

TEST_CASE("trunk placement and Q8G/Q4G rows follow reference section 8", "[convert][trunk]") {
  CHECK(trunk_format("model.norm.weight", {2304}, 4) == TensorFormat::f32);
  CHECK(trunk_format("x.weight", {255, 256}, 4) == TensorFormat::f32);  // < 65536 elements
  CHECK(trunk_format("x.weight", {256, 256}, 4) == TensorFormat::q4g);
  CHECK(trunk_format("x.weight", {256, 256}, 8) == TensorFormat::q8g);
  CHECK(trunk_format("model.embed_tokens.weight", {600, 512}, 4) == TensorFormat::q8g);
  CHECK(trunk_format("lm_head.weight", {600, 512}, 4) == TensorFormat::q8g);

  // 130 columns: two groups, the second with 2 live columns and 126 zero padding.
  std::vector<float> row(130, 0.0f);
  row[0] = 7.0f;
  row[1] = -3.5f;
  row[2] = 1.75f;   // 1.75 / 1.0 = 1.75 -> 2 (rint)
  row[3] = 2.5f;    // 2.5 -> 2 (half to even)
  row[128] = -0.5f;
  row[129] = 0.25f;
  std::vector<std::byte> q4(128), q8(256);
  std::vector<std::uint16_t> s4(2), s8(2);
  quantize_row(TensorFormat::q4g, row, q4, s4);
  CHECK(fp16_to_f32(s4[0]) == 1.0f);
  CHECK(std::to_integer<int>(q4[0]) == ((7 + 8) | ((-4 + 8) << 4)));  // -3.5 -> -4 (half to even)
  CHECK(std::to_integer<int>(q4[1]) == ((2 + 8) | ((2 + 8) << 4)));
  CHECK(std::to_integer<int>(q4[2]) == (8 | (8 << 4)));                // zeros
  CHECK(s4[1] == f32_to_fp16(0.5f / 7.0f));
  const float s2 = 0.5f / 7.0f;  // f32 scale of group 2 (q computed with it, not its fp16)
  CHECK(std::to_integer<int>(q4[64]) == ((int(std::nearbyint(-0.5f / s2)) + 8) | ((int(std::nearbyint(0.25f / s2)) + 8) << 4)));
  CHECK(std::to_integer<int>(q4[65]) == 0);                            // padding stays zero bytes
  quantize_row(TensorFormat::q8g, row, q8, s8);
  CHECK(s8[0] == f32_to_fp16(7.0f / 127.0f));
  CHECK(std::int8_t(std::to_integer<int>(q8[0])) == 127);
  CHECK(std::int8_t(std::to_integer<int>(q8[1])) == int(std::nearbyint(-3.5f / (7.0f / 127.0f))));
  CHECK(std::int8_t(std::to_integer<int>(q8[128])) == -127);
}
