#include "compute/vision/tower.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "compute/vision/position_grid.hpp"
#include "compute/vision/vision_math.hpp"

namespace waste::vision {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// y_t = W x_t for the n rows of x.
void matmul(const forward::Exec& e, const kernels::QuantMatrix& w, const float* x, std::int64_t x_stride, int n,
            float* y, std::int64_t y_stride) {
  forward::matvec_tokens(e, w, x, x_stride, n, y, y_stride);
}

// Row-parallel loop over n rows (elementwise work: norms, activations, softmax).
template <class Fn>
void rows(const forward::Exec& e, std::int64_t n, Fn&& fn) {
  e.pool.parallel_for(n, 8, [&](std::int64_t b, std::int64_t end) {
    for (std::int64_t i = b; i < end; ++i) fn(i);
  });
}

// An f32 row-major view as a kernel matrix: rows x cols floats, row_stride floats apart.
kernels::QuantMatrix f32_view(const float* p, std::int64_t rows, std::int64_t cols, std::int64_t row_stride) {
  kernels::QuantMatrix m{};
  m.payload = reinterpret_cast<const std::uint8_t*>(p);
  m.scales = nullptr;
  m.rows = rows;
  m.cols = cols;
  m.row_stride = row_stride * std::int64_t(sizeof(float));
  m.group = 128;
  m.fmt = 0;
  return m;
}

}  // namespace

Result<VisionTower> VisionTower::load(const std::filesystem::path& dir, const Manifest& manifest) {
  auto config = VisionConfig::load(dir);
  if (!config) return std::unexpected(config.error());
  auto weights = VisionWeights::load(dir, manifest, *config);
  if (!weights) {
    return make_error(weights.error().code, dir.string() + ": " + weights.error().message);
  }
  return VisionTower(*config, std::move(*weights));
}

std::vector<float> VisionTower::embed(const forward::Exec& e, const Patches& patches) const {
  const VisionConfig& c = config_;
  const int L = patches.grid.patches(), D = c.hidden;
  std::vector<float> x(std::size_t(L) * D);
  matmul(e, weights_.patch_embed, patches.data.data(), patches.stride, L, x.data(), D);
  std::vector<float> pos(std::size_t(L) * D);
  resize_position_grid(weights_.pos_grid.data(), c.pos_h, c.pos_w, D, pos.data(), patches.grid.gh, patches.grid.gw);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += pos[i];
  return x;
}

Result<std::vector<float>> VisionTower::encode(const forward::Exec& e, const Patches& patches,
                                               TowerTimings* timings) const {
  const VisionConfig& c = config_;
  const int gw = patches.grid.gw, gh = patches.grid.gh;
  if (gw < 2 || gh < 2 || gw % 2 != 0 || gh % 2 != 0) {
    return make_error(Errc::argument, "vision: the patch grid " + std::to_string(gw) + "x" + std::to_string(gh) +
                                          " is not even on both axes (the tower merges 2x2)");
  }
  if (patches.stride < c.patch_values() ||
      patches.data.size() != std::size_t(patches.grid.patches()) * std::size_t(patches.stride)) {
    return make_error(Errc::argument, "vision: the patch matrix does not match its grid");
  }
  TowerTimings t;
  const int L = gw * gh, D = c.hidden, Q = c.qkv_hidden, I = c.inter, H = c.heads, hd = c.head_dim();
  const std::int64_t QKV = 3 * std::int64_t(Q);

  auto t0 = Clock::now();
  std::vector<float> x = embed(e, patches);
  t.embed += since(t0);

  std::vector<float> y(std::size_t(L) * D), qkv(std::size_t(L) * QKV), o(std::size_t(L) * Q);
  std::vector<float> ff(std::size_t(L) * I), scores(std::size_t(L) * L), vt(std::size_t(hd) * L);
  const float scale = 1.0f / std::sqrt(float(hd));
  auto norm_rows = [&](const std::vector<float>& w, const float* in, float* out, int width, float eps) {
    rows(e, L, [&](std::int64_t i) { forward::rms_norm(in + i * width, w.data(), width, eps, out + i * width); });
  };

  for (const VisionBlockWeights& b : weights_.blocks) {
    t0 = Clock::now();
    norm_rows(b.norm0, x.data(), y.data(), D, kTowerNormEps);
    t.norms += since(t0);

    t0 = Clock::now();
    matmul(e, b.wqkv, y.data(), D, L, qkv.data(), QKV);
    t.qkv += since(t0);

    t0 = Clock::now();
    rows(e, L, [&](std::int64_t i) {
      float* row = qkv.data() + i * QKV;
      const int px = int(i % gw), py = int(i / gw);
      rope_2d(row, H, hd, px, py);      // q
      rope_2d(row + Q, H, hd, px, py);  // k
    });
    t.rope += since(t0);

    t0 = Clock::now();
    for (int h = 0; h < H; ++h) {
      // scores[i][j] = q_i . k_j: the keys of head h as an f32 matrix strided through qkv.
      matmul(e, f32_view(qkv.data() + Q + std::int64_t(h) * hd, L, hd, QKV), qkv.data() + std::int64_t(h) * hd,
             QKV, L, scores.data(), L);
      rows(e, L, [&](std::int64_t i) {
        float* s = scores.data() + i * L;
        float mx = -INFINITY;
        for (int j = 0; j < L; ++j) mx = std::max(mx, s[j] * scale);
        float sum = 0.0f;
        for (int j = 0; j < L; ++j) sum += (s[j] = std::exp(s[j] * scale - mx));
        const float inv = 1.0f / sum;
        for (int j = 0; j < L; ++j) s[j] *= inv;
      });
      // o_i = sum_j p_ij v_j, as the softmaxed rows against the values transposed to [hd][L].
      const float* v = qkv.data() + 2 * std::int64_t(Q) + std::int64_t(h) * hd;
      for (int j = 0; j < L; ++j) {
        for (int d = 0; d < hd; ++d) vt[std::size_t(d) * L + j] = v[std::int64_t(j) * QKV + d];
      }
      matmul(e, f32_view(vt.data(), hd, L, L), scores.data(), L, L, o.data() + std::int64_t(h) * hd, Q);
    }
    t.attention += since(t0);

    t0 = Clock::now();
    matmul(e, b.wo, o.data(), Q, L, y.data(), D);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    t.wo += since(t0);

    t0 = Clock::now();
    norm_rows(b.norm1, x.data(), y.data(), D, kTowerNormEps);
    t.norms += since(t0);

    t0 = Clock::now();
    matmul(e, b.fc0, y.data(), D, L, ff.data(), I);
    rows(e, L, [&](std::int64_t i) {
      float* r = ff.data() + i * I;
      for (int k = 0; k < I; ++k) r[k] = gelu_tanh(r[k]);
    });
    matmul(e, b.fc1, ff.data(), I, L, y.data(), D);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    t.mlp += since(t0);
  }

  t0 = Clock::now();
  norm_rows(weights_.final_norm, x.data(), y.data(), D, kTowerNormEps);
  // 2x2 merge: the four patches of each tile, (dy, dx) row-major, side by side -> 4D.
  const int mw = gw / 2, mh = gh / 2, N = mw * mh;
  const std::int64_t M = 4 * std::int64_t(D);
  std::vector<float> merged(std::size_t(N) * M);
  for (int a = 0; a < mh; ++a) {
    for (int bb = 0; bb < mw; ++bb) {
      float* dst = merged.data() + (std::int64_t(a) * mw + bb) * M;
      for (int dy = 0; dy < 2; ++dy) {
        for (int dx = 0; dx < 2; ++dx) {
          const float* src = y.data() + (std::int64_t(2 * a + dy) * gw + (2 * bb + dx)) * D;
          std::memcpy(dst + (dy * 2 + dx) * D, src, std::size_t(D) * sizeof(float));
        }
      }
    }
  }
  std::vector<float> h0(std::size_t(N) * M);
  matmul(e, weights_.proj0, merged.data(), M, N, h0.data(), M);
  rows(e, N, [&](std::int64_t i) {
    float* r = h0.data() + i * M;
    for (std::int64_t k = 0; k < M; ++k) r[k] = gelu_erf(r[k]);
  });
  const int T = c.text_hidden;
  std::vector<float> out(std::size_t(N) * T);
  matmul(e, weights_.proj2, h0.data(), M, N, out.data(), T);
  rows(e, N, [&](std::int64_t i) { forward::rms_norm(out.data() + i * T, weights_.post_norm.data(), T, kPostNormEps,
                                                      out.data() + i * T); });
  t.merge_project += since(t0);
  if (timings != nullptr) *timings = t;
  return out;
}

}  // namespace waste::vision
