// mHC coefficients, collapse, expansion and head (mhc.hpp).
#include "compute/forward/mhc.hpp"

#include <algorithm>
#include <cmath>

namespace waste::forward {

void mhc_sinkhorn(float* m, int n, int iters, float eps) {
  // Row softmax, then + eps.
  for (int i = 0; i < n; ++i) {
    float* row = m + i * n;
    const float top = *std::max_element(row, row + n);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - top);
      sum += row[j];
    }
    for (int j = 0; j < n; ++j) row[j] = row[j] / sum + eps;
  }
  auto normalise_columns = [&] {
    for (int j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int i = 0; i < n; ++i) sum += m[i * n + j];
      const float d = sum + eps;
      for (int i = 0; i < n; ++i) m[i * n + j] /= d;
    }
  };
  auto normalise_rows = [&] {
    for (int i = 0; i < n; ++i) {
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) sum += m[i * n + j];
      const float d = sum + eps;
      for (int j = 0; j < n; ++j) m[i * n + j] /= d;
    }
  };
  normalise_columns();
  for (int it = 1; it < iters; ++it) {
    normalise_rows();
    normalise_columns();
  }
}

void mhc_coefficients(const Exec& exec, const ModelConfig& c, const model::MhcWeights& w, const float* streams,
                      float* flat, float* mix, float* pre, float* post, float* comb) {
  const int hc = c.hc_mult, width = c.stream_width();
  // flat = streams * (mean(streams^2) + eps)^-1/2  (no weight); mix = fn . flat
  const float inv = rms_inverse(streams, width, c.rms_eps);
  for (int i = 0; i < width; ++i) flat[i] = streams[i] * inv;
  matvec(exec, w.fn, flat, mix);
  const float* base = w.base.data();
  const float s_pre = w.scale[0], s_post = w.scale[1], s_comb = w.scale[2];
  for (int k = 0; k < hc; ++k) {
    pre[k] = sigmoid(mix[k] * s_pre + base[k]) + c.hc_eps;
    post[k] = 2.0f * sigmoid(mix[hc + k] * s_post + base[hc + k]);
  }
  for (int k = 0; k < hc * hc; ++k) comb[k] = mix[2 * hc + k] * s_comb + base[2 * hc + k];
  mhc_sinkhorn(comb, hc, c.hc_sinkhorn_iters, c.hc_eps);
}

void mhc_single_pass_site(const Exec& exec, const ModelConfig& c, const model::MhcWeights& w, const float* streams,
                          const float* carried_pre, float* flat, float* mix, float* sublayer_in, float* next_pre,
                          float* post, float* comb) {
  mhc_collapse(carried_pre, streams, c.hc_mult, c.hidden, sublayer_in);
  mhc_coefficients(exec, c, w, streams, flat, mix, next_pre, post, comb);
}

void mhc_first_pre(int hc, float* pre) {
  pre[0] = 1.0f;
  for (int k = 1; k < hc; ++k) pre[k] = 0.0f;
}

void mhc_collapse(const float* pre, const float* streams, int hc, int hidden, float* out) {
  for (int d = 0; d < hidden; ++d) out[d] = pre[0] * streams[d];
  for (int k = 1; k < hc; ++k) {
    const float* s = streams + std::int64_t(k) * hidden;
    for (int d = 0; d < hidden; ++d) out[d] += pre[k] * s[d];
  }
}

void mhc_expand(const float* post, const float* comb, const float* y, float* streams, int hc, int hidden) {
  constexpr int kMaxStreams = 16;  // ModelConfig bounds hc_mult to 16
  float old[kMaxStreams];
  for (int d = 0; d < hidden; ++d) {
    for (int k = 0; k < hc; ++k) old[k] = streams[std::int64_t(k) * hidden + d];
    for (int i = 0; i < hc; ++i) {
      float acc = post[i] * y[d];
      for (int k = 0; k < hc; ++k) acc += comb[k * hc + i] * old[k];
      streams[std::int64_t(i) * hidden + d] = acc;
    }
  }
}

void mhc_head(const float* streams, int hc, int hidden, float* out) {
  const float inv = 1.0f / float(hc);
  for (int d = 0; d < hidden; ++d) {
    float sum = 0.0f;
    for (int k = 0; k < hc; ++k) sum += streams[std::int64_t(k) * hidden + d];
    out[d] = sum * inv;
  }
}

}  // namespace waste::forward
