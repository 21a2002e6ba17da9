// GLM-5.3-Flash's pieces against hand-computed numbers: the mHC Sinkhorn mixer (doubly
// stochastic after its iterations; exact values for a 2 x 2 case), the stream collapse,
// expansion and head, and the clamped SwiGLU of ffn_activation (and that limit 0 leaves the
// plain SiLU bit for bit).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "compute/forward/mhc.hpp"
#include "compute/forward/ops.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"

namespace waste {

TEST_CASE("mHC Sinkhorn mixer: hand-computed 2x2 values after one and two rounds", "[compute][mhc]") {
  // Logits [[0, ln 3], [0, 0]], eps 0: row softmax [[1/4, 3/4], [1/2, 1/2]]; column sums 3/4 and
  // 5/4 give [[1/3, 3/5], [2/3, 2/5]]. A second round (rows, then columns) gives
  // [[4/11, 12/19], [7/11, 7/19]].
  float m[4] = {0.0f, std::log(3.0f), 0.0f, 0.0f};
  forward::mhc_sinkhorn(m, 2, 1, 0.0f);
  CHECK(m[0] == Approx(1.0 / 3.0).epsilon(1e-6));
  CHECK(m[1] == Approx(0.6).epsilon(1e-6));
  CHECK(m[2] == Approx(2.0 / 3.0).epsilon(1e-6));
  CHECK(m[3] == Approx(0.4).epsilon(1e-6));

  float m2[4] = {0.0f, std::log(3.0f), 0.0f, 0.0f};
  forward::mhc_sinkhorn(m2, 2, 2, 0.0f);
  CHECK(m2[0] == Approx(4.0 / 11.0).epsilon(1e-6));
  CHECK(m2[1] == Approx(12.0 / 19.0).epsilon(1e-6));
  CHECK(m2[2] == Approx(7.0 / 11.0).epsilon(1e-6));
  CHECK(m2[3] == Approx(7.0 / 19.0).epsilon(1e-6));
}

TEST_CASE("mHC Sinkhorn mixer: 20 rounds make every row and column sum to 1", "[compute][mhc]") {
  // Mild logits: rows and columns within 1e-5 of 1.
  {
    constexpr int n = 4;
    float m[n * n];
    for (int k = 0; k < n * n; ++k) m[k] = 0.1f * float((k * 7) % 5) - 0.2f;
    forward::mhc_sinkhorn(m, n, 20, 1e-6f);
    for (int i = 0; i < n; ++i) {
      float row = 0.0f, col = 0.0f;
      for (int j = 0; j < n; ++j) {
        row += m[i * n + j];
        col += m[j * n + i];
      }
      CHECK(std::fabs(row - 1.0f) < 1e-5f);
      CHECK(std::fabs(col - 1.0f) < 1e-5f);
    }
  }
  // Lopsided logits (a softmax of up to e^6 ratios) still end doubly stochastic.
  constexpr int n = 4;
  float m[n * n] = {3.0f, -1.0f, 0.5f, 2.0f,  -2.0f, 1.5f, 0.0f, 0.25f,
                    0.0f, 0.0f,  4.0f, -3.0f, 1.0f,  2.0f, -1.0f, 0.5f};
  forward::mhc_sinkhorn(m, n, 20, 1e-6f);
  for (int i = 0; i < n; ++i) {
    float row = 0.0f, col = 0.0f;
    for (int j = 0; j < n; ++j) {
      CHECK(m[i * n + j] > 0.0f);
      row += m[i * n + j];
      col += m[j * n + i];
    }
    INFO("index " << i);
    // Sinkhorn converges geometrically; on these lopsided logits 20 rounds leave the rows within
    // 1.3e-3 of 1 (float64 gives the same), the columns exact from the last step.
    CHECK(std::fabs(row - 1.0f) < 2e-3f);
    CHECK(std::fabs(col - 1.0f) < 1e-5f);
  }
  // One round alone leaves the rows far from 1 here: the iterations do the work.
  float once[n * n] = {3.0f, -1.0f, 0.5f, 2.0f,  -2.0f, 1.5f, 0.0f, 0.25f,
                       0.0f, 0.0f,  4.0f, -3.0f, 1.0f,  2.0f, -1.0f, 0.5f};
  forward::mhc_sinkhorn(once, n, 1, 1e-6f);
  float worst = 0.0f;
  for (int i = 0; i < n; ++i) worst = std::max(worst, std::fabs(once[i * n] + once[i * n + 1] + once[i * n + 2] + once[i * n + 3] - 1.0f));
  CHECK(worst > 0.1f);
}

TEST_CASE("mHC collapse, expansion and head on two streams", "[compute][mhc]") {
  // streams x0 = (1, 2), x1 = (3, -1); pre (0.5, 2); post (2, 0.5); comb [[0.75, 0.25], [0.25, 0.75]]
  // (comb[k][i]: stream k's share in new stream i); y = (10, -4).
  const float x_in[4] = {1.0f, 2.0f, 3.0f, -1.0f};
  const float pre[2] = {0.5f, 2.0f}, post[2] = {2.0f, 0.5f};
  const float comb[4] = {0.75f, 0.25f, 0.25f, 0.75f};
  float collapsed[2];
  forward::mhc_collapse(pre, x_in, 2, 2, collapsed);
  CHECK(collapsed[0] == 6.5f);   // 0.5*1 + 2*3
  CHECK(collapsed[1] == -1.0f);  // 0.5*2 + 2*(-1)
  float x[4];
  std::memcpy(x, x_in, sizeof x);
  const float y[2] = {10.0f, -4.0f};
  forward::mhc_expand(post, comb, y, x, 2, 2);
  CHECK(x[0] == 21.5f);   // 2*10 + 0.75*1 + 0.25*3
  CHECK(x[1] == -6.75f);  // 2*(-4) + 0.75*2 + 0.25*(-1)
  CHECK(x[2] == 7.5f);    // 0.5*10 + 0.25*1 + 0.75*3
  CHECK(x[3] == -2.25f);  // 0.5*(-4) + 0.25*2 + 0.75*(-1)
  float head[2];
  forward::mhc_head(x, 2, 2, head);
  CHECK(head[0] == 14.5f);
  CHECK(head[1] == -4.5f);
}

TEST_CASE("Clamped SwiGLU: gate clamped above, up both sides, before SiLU times up", "[compute][mhc]") {
  ModelConfig c;
  c.swiglu_limit = 1.0f;
  const float a[5] = {-3.0f, 0.5f, 2.0f, 5.0f, 0.25f};
  const float b[5] = {-2.0f, 0.5f, 0.9f, 3.0f, -7.0f};
  // silu(min(a, 1)) * clamp(b, -1, 1), by hand
  const double want[5] = {0.14227761953270035, 0.15561483280046365, 0.6579527207670044, 0.7310585786300049,
                          -0.14054412522144952};
  float out[5];
  forward::ffn_activation(c, a, b, 5, out);
  for (int i = 0; i < 5; ++i) {
    INFO("element " << i);
    CHECK(out[i] == Approx(want[i]).epsilon(1e-6));
  }
  // A large gate below the limit is not clamped from below: silu(-3) stays negative times up.
  // Limit 0 = no clamp: the plain SiLU(a) * b bits.
  c.swiglu_limit = 0.0f;
  forward::ffn_activation(c, a, b, 5, out);
  for (int i = 0; i < 5; ++i) {
    const float plain = a[i] / (1.0f + std::exp(-a[i])) * b[i];
    CHECK(std::memcmp(&out[i], &plain, sizeof plain) == 0);
  }
  CHECK(out[3] == Approx(5.0 / (1.0 + std::exp(-5.0)) * 3.0).epsilon(1e-6));  // unclamped: 14.9...
}

// DeepSeek-V4.1's single-pass mHC: the sublayer reads the streams collapsed with the pre carried
// from the previous site; the site's own coefficients (GLM's mhc_coefficients) go to the next.
TEST_CASE("Single-pass mHC: a site collapses with the carried pre and hands its own pre on", "[compute][mhc]") {
  ThreadPool pool(1);
  const forward::Exec exec{pool, kernels::generic()};
  ModelConfig c;
  c.hc_mult = 2;
  c.hidden = 2;
  c.hc_eps = 0.0f;
  c.hc_sinkhorn_iters = 20;
  c.rms_eps = 1e-20f;
  // fn = 0: mix = 0, so pre = sigmoid(base[0:2]) = (1/2, 3/4), post = 2 sigmoid(0) = (1, 1), comb
  // = the uniform 1/2 (zero logits stay uniform through Sinkhorn).
  std::vector<float> fn(std::size_t(c.hc_mix()) * 4, 0.0f);
  model::MhcWeights w;
  w.fn = kernels::QuantMatrix{reinterpret_cast<const std::uint8_t*>(fn.data()), nullptr, c.hc_mix(), 4, 16, 128, 0};
  w.base.assign(std::size_t(c.hc_mix()), 0.0f);
  w.base[1] = std::log(3.0f);
  w.scale = {1.0f, 1.0f, 1.0f};
  const float x[4] = {1.0f, 2.0f, 3.0f, -1.0f};
  float flat[4], mix[8], in[2], pre[2], post[2], comb[4];
  forward::mhc_first_pre(2, pre);
  CHECK(pre[0] == 1.0f);
  CHECK(pre[1] == 0.0f);
  // Layer 0's attention: stream 0 exactly; the carried pre's storage receives the site's pre.
  forward::mhc_single_pass_site(exec, c, w, x, pre, flat, mix, in, pre, post, comb);
  CHECK(in[0] == 1.0f);
  CHECK(in[1] == 2.0f);
  CHECK(pre[0] == Approx(0.5).epsilon(1e-7));
  CHECK(pre[1] == Approx(0.75).epsilon(1e-7));
  CHECK(post[0] == 1.0f);
  for (float v : comb) CHECK(v == Approx(0.5).epsilon(1e-6));
  // The next site reads 1/2 x0 + 3/4 x1 = (2.75, 0.25), whatever its own projection says.
  forward::mhc_single_pass_site(exec, c, w, x, pre, flat, mix, in, pre, post, comb);
  CHECK(in[0] == Approx(2.75).epsilon(1e-6));
  CHECK(in[1] == Approx(0.25).epsilon(1e-6));

  // With a real projection the handed-on pre, post and comb are GLM's coefficients bit for bit.
  for (std::size_t i = 0; i < fn.size(); ++i) fn[i] = 0.1f * float(int(i * 7 % 11) - 5);
  float want_pre[2], want_post[2], want_comb[4], carried[2] = {0.25f, 0.75f};
  forward::mhc_coefficients(exec, c, w, x, flat, mix, want_pre, want_post, want_comb);
  forward::mhc_single_pass_site(exec, c, w, x, carried, flat, mix, in, pre, post, comb);
  CHECK(std::memcmp(pre, want_pre, sizeof pre) == 0);
  CHECK(std::memcmp(post, want_post, sizeof post) == 0);
  CHECK(std::memcmp(comb, want_comb, sizeof comb) == 0);
  CHECK(in[0] == Approx(0.25 * 1 + 0.75 * 3).epsilon(1e-6));  // the carried pre, not want_pre
  CHECK(in[1] == Approx(0.25 * 2 - 0.75).epsilon(1e-6));
  CHECK(std::fabs(want_pre[0] - 0.25f) > 0.01f);
}

}  // namespace waste
