// Multi-head latent attention with kv_b_proj absorbed, NoPE (waste-v0-reference.md §3.5).
// The cache holds [c, k_r] per token; keys and values are never expanded per head.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/forward/forward.hpp"

namespace waste::forward {

void MlaScratch::resize(const ModelConfig& c, int ctx_tokens) {
  const std::size_t nh = std::size_t(c.n_heads), qd = std::size_t(c.qk_nope + c.qk_rope);
  q.assign(nh * qd, 0.0f);
  q_a.assign(std::size_t(c.q_lora), 0.0f);
  ckv.assign(std::size_t(c.kv_lora + c.qk_rope), 0.0f);
  q_tilde.assign(nh * c.kv_lora, 0.0f);
  row.assign(nh * c.kv_lora, 0.0f);
  ctx.assign(nh * c.kv_lora, 0.0f);
  scores.assign(nh * std::size_t(ctx_tokens), 0.0f);
  o.assign(nh * c.v_head, 0.0f);
  gate.assign(nh * c.v_head, 0.0f);
}

void mla_forward(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x, int pos,
                 float* latent_cache, MlaScratch& s, float* out) {
  const int nh = c.n_heads, nope = c.qk_nope, rope = c.qk_rope, qd = nope + rope;
  const int lora = c.kv_lora, vd = c.v_head, width = lora + rope;
  const int ctx_tokens = int(s.scores.size() / std::size_t(nh));

  // q = q_proj x  or  q_b(rms(q_a x)); layout [nh][nope | rope]
  if (c.q_lora > 0) {
    matvec(exec, w.q_a, x, s.q_a.data());
    rms_norm(s.q_a.data(), w.q_a_norm.data(), c.q_lora, c.rms_eps, s.q_a.data());
    matvec(exec, w.q_b, s.q_a.data(), s.q.data());
  } else {
    matvec(exec, w.q_proj, x, s.q.data());
  }

  // [c, k_r] = [rms(ckv[:lora]), ckv[lora:]] into cache slot pos
  matvec(exec, w.kv_a, x, s.ckv.data());
  float* slot = latent_cache + std::int64_t(pos) * width;
  rms_norm(s.ckv.data(), w.kv_a_norm.data(), lora, c.rms_eps, slot);
  std::memcpy(slot + lora, s.ckv.data() + lora, std::size_t(rope) * sizeof(float));

  const float scale = 1.0f / std::sqrt(float(qd));
  const int n_kv = pos + 1;
  const auto* kt = &exec.kernels;
  exec.pool.parallel_for(nh, 1, [&](std::int64_t h_begin, std::int64_t h_end) {
    for (std::int64_t h = h_begin; h < h_end; ++h) {
      const float* q_nope = s.q.data() + h * qd;
      const float* q_rope = q_nope + nope;
      float* q_tilde = s.q_tilde.data() + h * lora;
      float* row = s.row.data() + h * lora;
      float* scores = s.scores.data() + h * ctx_tokens;
      float* ctx = s.ctx.data() + h * lora;
      const std::int64_t head_row = h * std::int64_t(nope + vd);

      // q~ = W_kb,h^T q_nope: accumulate dequantised K rows, row i weighted by q_nope[i].
      std::fill(q_tilde, q_tilde + lora, 0.0f);
      for (int i = 0; i < nope; ++i) {
        dequantize_row(w.kv_b, head_row + i, row);
        const float qi = q_nope[i];
        for (int j = 0; j < lora; ++j) q_tilde[j] += qi * row[j];
      }

      // s_t = (q~ . c_t + q_rope . k_r,t) / sqrt(qd), softmax over t = 0..pos
      float max_score = -INFINITY;
      for (int t = 0; t < n_kv; ++t) {
        const float* ct = latent_cache + std::int64_t(t) * width;
        float dot_c = 0.0f, dot_r = 0.0f;
        for (int j = 0; j < lora; ++j) dot_c += q_tilde[j] * ct[j];
        for (int j = 0; j < rope; ++j) dot_r += q_rope[j] * ct[lora + j];
        scores[t] = (dot_c + dot_r) * scale;
        max_score = std::max(max_score, scores[t]);
      }
      float sum = 0.0f;
      for (int t = 0; t < n_kv; ++t) {
        scores[t] = std::exp(scores[t] - max_score);
        sum += scores[t];
      }
      for (int t = 0; t < n_kv; ++t) scores[t] /= sum;

      // c~ = sum_t a_t c_t;  o_h = W_vb,h c~
      std::fill(ctx, ctx + lora, 0.0f);
      for (int t = 0; t < n_kv; ++t) {
        const float* ct = latent_cache + std::int64_t(t) * width;
        const float a = scores[t];
        for (int j = 0; j < lora; ++j) ctx[j] += a * ct[j];
      }
      const kernels::QuantMatrix w_vb = model::row_slice(w.kv_b, head_row + nope, vd);
      kt->matvec(w_vb, ctx, s.o.data() + h * vd, 0, vd);
    }
  });

  // K3: o *= sigmoid(g_proj x)
  if (c.mla_output_gate) {
    matvec(exec, w.g_proj, x, s.gate.data());
    for (std::size_t i = 0; i < s.o.size(); ++i) s.o[i] *= sigmoid(s.gate[i]);
  }
  matvec(exec, w.o_proj, s.o.data(), out);
}

}  // namespace waste::forward
