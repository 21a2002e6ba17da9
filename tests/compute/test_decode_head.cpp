// The lm_head's copies for decode rows (compute/model/decode_head.hpp, forward/head_mode.hpp): every
// group's scale and code as the converter's rule gives them from the stored Q8G values (q4: Q4G,
// q6: the run-time Q6P layout), the same bytes whatever the pool's size, each weight within half
// its step of the stored one; the int8 product on Q6P equal, bit for bit, to the product on a Q8G
// matrix holding the same codes (code - 32 as int8, the same scales) and, on AVX-512 VNNI, the
// vector kernel equal to the reference for 1-20 tokens and any rows; bad matrices and modes refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/forward/head_mode.hpp"
#include "compute/kernels/int8_matmul.hpp"
#include "compute/model/decode_head.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "int8_prefill_guard.hpp"
#include "shared/container/container.hpp"
#include "shared/fp16.hpp"
#include "test_forward_fixtures.hpp"
#include "test_kernels_fixtures.hpp"

using waste::forward::HeadMode;

namespace {

// Column c of row r, group g's code in the copy (the signed value: Q4G q - 8, Q6P u - 32), read from
// the layouts as int8_matmul.hpp describes them.
int code_of(const waste::kernels::QuantMatrix& m, std::int64_t r, int g, int c) {
  const std::uint8_t* row = m.payload + r * m.row_stride;
  if (m.fmt == 3) {
    const int col = g * 128 + c;
    const std::uint8_t byte = row[col / 2];
    return int(col % 2 ? byte >> 4 : byte & 15) - 8;
  }
  const std::int64_t groups = m.cols / 128;
  const std::uint8_t* p = row + g * 64;
  const std::uint8_t* h = row + groups * 64 + g * 32;
  const int i = c / 2, k = i / 16, j = i % 16;
  const int low = c % 2 ? p[i] >> 4 : p[i] & 15;
  const int high = (h[16 * (c % 2) + j] >> (2 * k)) & 3;
  return low + 16 * high - 32;
}

}  // namespace

TEST_CASE("decode head: the copy of a Q8G lm_head follows the converter's rule, q4 and q6", "[compute][head]") {
  const HeadMode mode = GENERATE(HeadMode::q4, HeadMode::q6);
  const bool q6 = mode == HeadMode::q6;
  const int qmax = q6 ? 31 : 7;
  INFO("mode " << waste::forward::head_mode_name(mode));
  constexpr std::int64_t kRows = 333, kCols = 384;
  auto m = waste::test::make_trunk_matrix(2, kRows, kCols, 1200);
  // Extremes: a group at the int8 limits, an all-zero group.
  for (std::int64_t c = 0; c < 128; ++c) m.payload[std::size_t(c)] = std::uint8_t(c % 2 ? 127 : 0x81);
  std::memset(m.payload.data() + kCols + 128, 0, 128);
  waste::ThreadPool pool(2);
  auto head = waste::model::DecodeHead::requantize(m.view, mode, pool);
  REQUIRE(head);
  const waste::kernels::QuantMatrix& copy = head->matrix();
  CHECK(copy.fmt == (q6 ? waste::kernels::kFmtQ6P : 3));
  CHECK(copy.rows == kRows);
  CHECK(copy.cols == kCols);
  CHECK(copy.row_stride == (q6 ? 3 * 96 : kCols / 2));
  CHECK(copy.group == 128);
  CHECK(waste::kernels::int8_matmul_supports(copy));
  CHECK(head->bytes() == std::uint64_t(kRows * copy.row_stride + kRows * 3 * 2));
  int nonzero_steps = 0, at_limits = 0;
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (int g = 0; g < 3; ++g) {
      INFO("row " << r << " group " << g);
      const float s8 = waste::fp16_to_f32(m.scales[std::size_t(r * 3 + g)]);
      float v[128];
      float amax = 0.0f;
      for (int i = 0; i < 128; ++i) {
        v[i] = float(std::int8_t(m.payload[std::size_t(r * kCols + g * 128 + i)])) * s8;
        amax = std::max(amax, std::fabs(v[i]));
      }
      const float s = std::max(amax, 1e-8f) / float(qmax);
      REQUIRE(copy.scales[r * 3 + g] == waste::f32_to_fp16(s));
      const float step = waste::fp16_to_f32(copy.scales[r * 3 + g]);
      if (amax > 0.0f) ++nonzero_steps;
      for (int c = 0; c < 128; ++c) {
        const int q = code_of(copy, r, g, c);
        REQUIRE(q == int(std::clamp(std::nearbyint(v[c] / s), float(-qmax - 1), float(qmax))));
        if (q == qmax || q == -qmax) ++at_limits;
        // Within half a step of the stored weight (plus the fp16 scale's rounding over qmax steps).
        CHECK(std::fabs(float(q) * step - v[c]) <= step / 2 + float(qmax + 1) * std::fabs(step - s) + 1e-12f);
      }
    }
  }
  CHECK(nonzero_steps == kRows * 3 - 1);
  CHECK(at_limits >= 128);
  // Rows split differently, the same bytes.
  waste::ThreadPool one(1);
  auto again = waste::model::DecodeHead::requantize(m.view, mode, one);
  REQUIRE(again);
  CHECK(std::memcmp(again->matrix().payload, copy.payload, std::size_t(kRows * copy.row_stride)) == 0);
  CHECK(std::memcmp(again->matrix().scales, copy.scales, std::size_t(kRows * 3 * 2)) == 0);
}

TEST_CASE("decode head: the int8 product on Q6P is the product on the same codes as Q8G, on every path",
          "[compute][head]") {
  // 35 groups: two blocks of 16 scales and a short one; rows not a multiple of 16.
  constexpr std::int64_t kRows = 37, kCols = 35 * 128;
  const auto q8 = waste::test::make_trunk_matrix(2, kRows, kCols, 1210);
  waste::ThreadPool pool(2);
  auto head = waste::model::DecodeHead::requantize(q8.view, HeadMode::q6, pool);
  REQUIRE(head);
  // Rows 0 and 1 at the extreme codes (63 and 0), row 2 with every high-bit pattern.
  std::vector<std::uint8_t> bytes(head->matrix().payload, head->matrix().payload + kRows * head->matrix().row_stride);
  const std::int64_t stride = head->matrix().row_stride;
  std::fill(bytes.begin(), bytes.begin() + stride, std::uint8_t{0xFF});
  std::fill(bytes.begin() + stride, bytes.begin() + 2 * stride, std::uint8_t{0x00});
  for (std::int64_t b = 0; b < stride; ++b) bytes[std::size_t(2 * stride + b)] = std::uint8_t(b * 37 + 11);
  waste::kernels::QuantMatrix q6 = head->matrix();
  q6.payload = bytes.data();
  // The same codes as a Q8G matrix: code - 32 as int8, the same scales.
  std::vector<std::uint8_t> same(std::size_t(kRows * kCols));
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (int g = 0; g < 35; ++g) {
      for (int c = 0; c < 128; ++c) same[std::size_t(r * kCols + g * 128 + c)] = std::uint8_t(std::int8_t(code_of(q6, r, g, c)));
    }
  }
  CHECK(code_of(q6, 0, 0, 5) == 31);
  CHECK(code_of(q6, 1, 34, 127) == -32);
  waste::kernels::QuantMatrix as_q8 = q6;
  as_q8.payload = same.data();
  as_q8.row_stride = kCols;
  as_q8.fmt = 2;
  for (int n : {1, 2, 3, 4, 5, 7, 8, 13, 15, 16, 20}) {  // the one-token, quad and transposed tiles
    std::vector<float> x = waste::test::random_floats(std::size_t(n * kCols), 1220 + n);
    for (std::int64_t c = 0; c < 128; ++c) x[std::size_t(c)] = c % 2 ? 4.0f : -4.0f;  // group 0 of token 0 at +-127
    waste::kernels::Int8Acts a;
    waste::kernels::quantize_acts(x.data(), kCols, n, kCols, a);
    const std::int64_t ranges[][2] = {{0, kRows}, {1, 17}, {16, 37}, {36, 37}, {0, 3}};
    for (const auto& rg : ranges) {
      INFO("n " << n << " rows [" << rg[0] << ", " << rg[1] << ")");
      std::vector<float> want(std::size_t(n * kRows), 0.0f), got = want, vec = want;
      waste::kernels::matmul_i8_generic(as_q8, a, want.data(), kRows, rg[0], rg[1]);
      waste::kernels::matmul_i8_generic(q6, a, got.data(), kRows, rg[0], rg[1]);
      CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
      waste::kernels::matmul_i8()(q6, a, vec.data(), kRows, rg[0], rg[1]);
      CHECK(std::memcmp(want.data(), vec.data(), want.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("decode head: a matrix other than Q8G over whole groups, or mode q8, is refused by name", "[compute][head]") {
  waste::ThreadPool pool(1);
  const auto q4 = waste::test::make_trunk_matrix(3, 8, 256, 1201);
  auto refused = waste::model::DecodeHead::requantize(q4.view, HeadMode::q6, pool);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message ==
        "lm_head: the decode head's copy needs a Q8G matrix with groups of 128 over whole groups of columns "
        "(fmt 3, group 128, 256 columns)");
  const auto partial = waste::test::make_trunk_matrix(2, 8, 200, 1202);
  refused = waste::model::DecodeHead::requantize(partial.view, HeadMode::q4, pool);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message ==
        "lm_head: the decode head's copy needs a Q8G matrix with groups of 128 over whole groups of columns "
        "(fmt 2, group 128, 200 columns)");
  const auto fine = waste::test::make_trunk_matrix(2, 8, 256, 1203);
  refused = waste::model::DecodeHead::requantize(fine.view, HeadMode::q8, pool);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "lm_head: the q8 decode head is the stored matrix, not a copy");
  // A Q6P view whose stride is not 96 bytes a group is not one the product takes.
  auto head = waste::model::DecodeHead::requantize(fine.view, HeadMode::q6, pool);
  REQUIRE(head);
  waste::kernels::QuantMatrix bad = head->matrix();
  bad.row_stride -= 1;
  CHECK_FALSE(waste::kernels::int8_matmul_supports(bad));
}

TEST_CASE("decode head: modes parse, bad values are refused naming the source", "[compute][head]") {
  CHECK(waste::forward::parse_head_mode("q8", "--decode-head").value() == HeadMode::q8);
  CHECK(waste::forward::parse_head_mode("q6", "--decode-head").value() == HeadMode::q6);
  CHECK(waste::forward::parse_head_mode("q4", "--decode-head").value() == HeadMode::q4);
  auto bad = waste::forward::parse_head_mode("q5", "--decode-head");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "--decode-head: 'q5' is not a decode head (q8, q6 or q4)");
  auto env = waste::forward::resolve_head_mode("Q6");
  REQUIRE_FALSE(env);
  CHECK(env.error().message == "WASTE_DECODE_HEAD: 'Q6' is not a decode head (q8, q6 or q4)");
  CHECK(waste::forward::resolve_head_mode(nullptr).value() == waste::forward::default_head_mode());
  CHECK(waste::forward::resolve_head_mode("").value() == waste::forward::default_head_mode());
}

namespace {

// Pins the decode head's mode (and both int8 rules on) for one scope, restoring what was in force.
class HeadModeGuard {
 public:
  explicit HeadModeGuard(HeadMode mode) : rules_(true, true) { waste::forward::set_head_mode(mode, "test"); }
  ~HeadModeGuard() { waste::forward::set_head_mode(saved_, "test"); }
  HeadModeGuard(const HeadModeGuard&) = delete;
  HeadModeGuard& operator=(const HeadModeGuard&) = delete;

 private:
  waste::test::Int8PrefillGuard rules_;
  HeadMode saved_ = waste::forward::head_mode();
};

struct Logits {
  std::vector<float> prompt;      // after a prompt
  std::vector<float> steps;       // after each of 12 decode steps, one at a time (concatenated)
  std::vector<float> chunk_last;  // after the same 12 as one chunk of decode rows
};

Logits run(const std::filesystem::path& dir, HeadMode mode) {
  HeadModeGuard guard(mode);
  waste::EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = 96;
  o.lookahead = 0;
  auto engine = waste::Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  const int vocab = (*engine)->config().vocab;
  std::vector<int> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((i * 53 + 11) % vocab);
  Logits l;
  auto out = (*engine)->eval(ids, {}, waste::FeedKind::prompt);
  REQUIRE(out);
  l.prompt.assign(out->begin(), out->end());
  (*engine)->reset();
  for (const int token : ids) {
    out = (*engine)->eval(std::span<const int>(&token, 1), {}, waste::FeedKind::decode);
    REQUIRE(out);
    l.steps.insert(l.steps.end(), out->begin(), out->end());
  }
  (*engine)->reset();
  out = (*engine)->eval(ids, {}, waste::FeedKind::decode);
  REQUIRE(out);
  l.chunk_last.assign(out->begin(), out->end());
  return l;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// Engine::open makes the copy under q6 or q4 with the decode rule on: decode steps read it (their
// logits move, within a share of the logits' range that grows as the bits shrink, and a chunk of
// decode rows gives the last row a step's bits), prompts keep the stored matrix's bits.
TEST_CASE("decode head: q6 and q4 move decode steps' logits only, alone or in a chunk alike", "[compute][head]") {
  const struct {
    const char* preset;
    float q6_bound, q4_bound;  // share of the q8 logits' range
  } cases[] = {{"tiny", 0.015f, 0.07f}, {"kl-shaped", 0.015f, 0.07f}};  // measured 0.0075 / 0.035, 0.0073 / 0.034
  for (const auto& [preset, q6_bound, q4_bound] : cases) {
    INFO(preset);
    const auto dir = waste::test::container_for(preset);
    const Logits q8 = run(dir, HeadMode::q8);
    float lo = q8.steps[0], hi = q8.steps[0];
    for (const float v : q8.steps) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    float previous = 0.0f;
    for (const auto& [mode, bound] : {std::pair{HeadMode::q6, q6_bound}, std::pair{HeadMode::q4, q4_bound}}) {
      INFO("mode " << waste::forward::head_mode_name(mode));
      const Logits l = run(dir, mode);
      CHECK(same_bits(l.prompt, q8.prompt));
      CHECK_FALSE(same_bits(l.steps, q8.steps));
      const std::size_t vocab = q8.chunk_last.size();
      CHECK(same_bits(l.chunk_last, std::vector<float>(l.steps.end() - std::ptrdiff_t(vocab), l.steps.end())));
      float diff = 0.0f;
      for (std::size_t i = 0; i < q8.steps.size(); ++i) diff = std::max(diff, std::fabs(l.steps[i] - q8.steps[i]));
      INFO("max |diff| " << diff << ", logit range " << hi - lo);
      CHECK(diff <= bound * (hi - lo));
      CHECK(diff > previous);  // fewer bits, further
      previous = diff;
    }
  }
}

TEST_CASE("decode head: the copy's size is asked of the budget only when it is made", "[compute][head]") {
  const auto dir = waste::test::container_for("tiny");
  auto info = waste::ContainerInfo::open(dir);
  REQUIRE(info);
  const waste::Manifest& m = info->manifest;
  const std::uint64_t rows = std::uint64_t(m.config.vocab), groups = std::uint64_t(m.config.hidden / 128);
  {
    HeadModeGuard guard(HeadMode::q6);
    CHECK(waste::model::decode_head_copy(m) == HeadMode::q6);
    CHECK(waste::model::decode_head_copy_bytes(m) == rows * groups * 98);
  }
  {
    HeadModeGuard guard(HeadMode::q4);
    CHECK(waste::model::decode_head_copy_bytes(m) == rows * groups * 66);
  }
  {
    HeadModeGuard guard(HeadMode::q8);
    CHECK(waste::model::decode_head_copy(m) == HeadMode::q8);
    CHECK(waste::model::decode_head_copy_bytes(m) == 0);
  }
  {
    HeadModeGuard guard(HeadMode::q6);
    waste::forward::set_int8_decode(false);  // the guard restores it
    CHECK(waste::model::decode_head_copy(m) == HeadMode::q8);
    CHECK(waste::model::decode_head_copy_bytes(m) == 0);
  }
}
