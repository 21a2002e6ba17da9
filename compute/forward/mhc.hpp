// Manifold-constrained hyper-connections (mHC, GLM-5.3-Flash; ResidualKind::mhc). The residual
// stream is hc = hc_mult parallel streams of `hidden` floats. Around every sublayer (attention,
// FFN) one site computes, from the streams of the token:
//   mix  = fn . (flat * (mean(flat^2) + rms_eps)^-1/2)          flat = the streams end to end
//   pre  = sigmoid(mix[0:hc] * scale[0] + base[0:hc]) + hc_eps   weights that collapse the streams
//   post = 2 sigmoid(mix[hc:2hc] * scale[1] + base[hc:2hc])     where the sublayer output goes
//   comb = Sinkhorn(softmax_rows(mix[2hc:] * scale[2] + base[2hc:]) + hc_eps)  stream mixer
// The sublayer reads sum_k pre[k] x[k]; afterwards x[i] <- post[i] y + sum_k comb[k][i] x[k].
// The head reads the plain mean of the streams. Every function works on one token.
//
// DeepSeek-V4.1's single-pass mHC (ResidualKind::mhc_single_pass) computes the same three sets
// from one projection per site (mhc_coefficients: one implementation for both families), but
// the `pre` a site computes is read by the NEXT site: a layer's attention collapses the streams
// with the previous layer's FFN-site pre, its FFN with its own attention-site pre. Layer 0's
// attention reads a one-hot pre (stream 0 only: mhc_first_pre); the head reads the streams
// collapsed with the last FFN site's pre (not the mean). The reference's rms_norm_eps (1e-20 in
// V4.1) is ModelConfig::rms_eps here as in GLM.
#pragma once

#include "compute/forward/ops.hpp"
#include "compute/model/weights.hpp"
#include "shared/container/model_config.hpp"

namespace waste::forward {

// m [n][n] row-major holds logits; on return the Sinkhorn-normalised mixer: each row's softmax
// plus eps, columns normalised, then (iters - 1) times rows then columns normalised, every
// division by the sum plus eps. Rows and columns then sum to 1 up to eps-sized terms.
void mhc_sinkhorn(float* m, int n, int iters, float eps);

// One site's coefficients for one token. streams [hc][hidden]; scratch flat [hc*hidden] and
// mix [hc_mix]; out pre [hc], post [hc], comb [hc][hc] (comb[k][i]: stream k's share in new
// stream i).
void mhc_coefficients(const Exec& exec, const ModelConfig& c, const model::MhcWeights& w, const float* streams,
                      float* flat, float* mix, float* pre, float* post, float* comb);

// Single-pass mHC, one site before its sublayer: sublayer_in = the streams collapsed with the
// pre carried from the previous site (carried_pre [hc]); then this site's coefficients into
// next_pre (carry it to the next site, or to the head after the last FFN), post and comb. After
// the sublayer: mhc_expand(post, comb, y, streams). carried_pre may be next_pre's storage (it is
// read before next_pre is written); sublayer_in must not alias streams.
void mhc_single_pass_site(const Exec& exec, const ModelConfig& c, const model::MhcWeights& w, const float* streams,
                          const float* carried_pre, float* flat, float* mix, float* sublayer_in, float* next_pre,
                          float* post, float* comb);

// The pre layer 0's attention reads: 1 for stream 0, 0 for the others (pre [hc]).
void mhc_first_pre(int hc, float* pre);

// out[d] = sum_k pre[k] streams[k][d]; out must not alias streams.
void mhc_collapse(const float* pre, const float* streams, int hc, int hidden, float* out);

// streams[i][d] <- post[i] y[d] + sum_k comb[k][i] streams[k][d], in place.
void mhc_expand(const float* post, const float* comb, const float* y, float* streams, int hc, int hidden);

// out[d] = mean_k streams[k][d]; out may be streams itself (stream 0 is overwritten).
void mhc_head(const float* streams, int hc, int hidden, float* out);

}  // namespace waste::forward
