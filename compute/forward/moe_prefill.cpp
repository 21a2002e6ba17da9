// MoE of a prefill chunk or a batch (waste-v0-reference.md §3.10): every token routed, each
// distinct expert read once in windows and applied to every token that chose it, sums in
// selection order per token: moe_forward's bits per decode token, and per prompt token under the
// per-token rule rvq_matmul's bits whatever else is in the pass (moe.hpp, expert_batch.hpp). A VQ4P
// expert's LUT-path tokens go through it in groups (run_expert_tokens): each token keeps its bits.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "compute/forward/expert_batch.hpp"
#include "compute/forward/ffn.hpp"
#include "compute/forward/moe.hpp"
#include "shared/memory/client_sizing.hpp"

namespace waste::forward {

Status moe_prefill(const Exec& exec, const ModelConfig& c, const model::MoeWeights& w, int layer, const float* x,
                   int n_tokens, const ExpertContext& ex, MoeScratch& s, PrefillMoeScratch& p, float* out,
                   int window, profile::Stopwatch* watch_in,
                   std::span<const float* const> embeddings) {
  profile::Stopwatch off;
  profile::Stopwatch& watch = watch_in ? *watch_in : off;
  const ExpertGeometry& g = ex.geometry;
  const int E = c.n_experts, K = c.top_k, hid = c.hidden, lat = c.expert_input_dim();
  const auto base = layer_codebook_base(ex, layer);
  if (!base) return std::unexpected(base.error());
  if (n_tokens > p.tokens) {
    return make_error(Errc::argument, "prefill chunk of " + std::to_string(n_tokens) + " tokens exceeds " +
                                          std::to_string(p.tokens));
  }
  const std::span<const unsigned char> prompt = exec.prompt_rows;  // the pass's flags (ops.hpp)
  if (!prompt.empty() && prompt.size() != std::size_t(n_tokens)) {
    return make_error(Errc::argument, "prefill MoE: " + std::to_string(prompt.size()) + " prompt flags for " +
                                          std::to_string(n_tokens) + " tokens");
  }
  if (!embeddings.empty() && embeddings.size() != std::size_t(n_tokens)) {
    return make_error(Errc::argument, "prefill MoE: " + std::to_string(embeddings.size()) + " embedding rows for " +
                                          std::to_string(n_tokens) + " tokens");
  }
  window = std::max(window, 1);
  // Per-token rule: prompt tokens by matrix products (no gate/up LUTs), the others by LUT.
  const bool per_token = expert_batch::per_token(g);
  auto by_matmul = [&](int t) { return per_token && !prompt.empty() && prompt[std::size_t(t)] != 0; };

  // Gate/up LUT rows exist for p.lut_rows tokens (kLutRows), not for every token of the pass:
  // prompt tokens under the per-token rule need none. A pass with more tokens on the LUT path
  // (decode tokens beyond the rows; every token under "off", the count rule or VQ4P) runs in
  // groups of lut_rows tokens: under the per-token rule a token's bits do not depend on its
  // group; under the count rule (A/B only) the counts are per group.
  int n_lut = 0;
  for (int t = 0; t < n_tokens; ++t) n_lut += by_matmul(t) ? 0 : 1;
  if (n_lut > p.lut_rows) {
    for (int t0 = 0; t0 < n_tokens; t0 += p.lut_rows) {
      const int n = std::min(p.lut_rows, n_tokens - t0);
      // The group's prompt flags: the experts' rule and the projections' int8 rule (ops.hpp) read them.
      const Exec group{exec.pool, exec.kernels,
                       prompt.empty() ? prompt : prompt.subspan(std::size_t(t0), std::size_t(n))};
      WASTE_TRY(moe_prefill(group, c, w, layer, x + std::int64_t(t0) * hid, n, ex, s, p, out + std::int64_t(t0) * hid,
                            window, watch_in,
                            embeddings.empty() ? embeddings : embeddings.subspan(std::size_t(t0), std::size_t(n))));
    }
    return ok();
  }
  for (int t = 0, slot = 0; t < n_tokens; ++t) p.lut_slot[std::size_t(t)] = by_matmul(t) ? -1 : slot++;

  // Route every token; keep its ids and weights in selection order.
  matvec_tokens(exec, w.router, x, hid, n_tokens, p.router.data(), E);
  for (int t = 0; t < n_tokens; ++t) {
    route(c, w, p.router.data() + std::int64_t(t) * E, s,
          !embeddings.empty() && embeddings[std::size_t(t)] != nullptr);
    std::copy_n(s.ids.data(), K, p.ids.data() + std::int64_t(t) * K);
    std::copy_n(s.weights.data(), K, p.weights.data() + std::int64_t(t) * K);
    watch.lap(profile::Stage::router);
  }

  // Distinct experts in ascending id, and per expert its users (t * K + j) in token order.
  std::fill(p.fill.begin(), p.fill.end(), 0);
  for (int u = 0; u < n_tokens * K; ++u) ++p.fill[std::size_t(p.ids[std::size_t(u)])];
  p.distinct.clear();
  p.user_begin[0] = 0;
  for (int e = 0; e < E; ++e) {
    if (p.fill[std::size_t(e)] > 0) p.distinct.push_back(e);
    p.user_begin[std::size_t(e) + 1] = p.user_begin[std::size_t(e)] + p.fill[std::size_t(e)];
    p.fill[std::size_t(e)] = p.user_begin[std::size_t(e)];
  }
  for (int u = 0; u < n_tokens * K; ++u) p.users[std::size_t(p.fill[std::size_t(p.ids[std::size_t(u)])]++)] = u;

  const int n_distinct = int(p.distinct.size());
  auto request_window = [&](int begin) -> Status {
    const int n = std::min(window, n_distinct - begin);
    Status requested = ex.source.request_layer(layer, std::span<const int>(p.distinct.data() + begin, std::size_t(n)));
    if (!requested) {
      ex.source.release_layer(layer);
    } else if (const int next = begin + n; next < n_distinct) {
      // The next window's reads queue behind this one's (unpinned, so never more than the cache
      // holds): the disk keeps reading while this window computes, not only between windows.
      ex.source.prefetch(layer, std::span<const int>(p.distinct.data() + next,
                                                     std::size_t(std::min(window, n_distinct - next))));
    }
    watch.add(profile::Stage::io_wait);
    return requested;
  };
  WASTE_TRY(request_window(0));

  // Per token: the routed input and its gate/up LUTs (while the first window reads).
  const std::size_t lut_in = std::size_t(sizing::lut_floats(g, 0));
  const std::size_t q_blocks = g.packed6 ? std::size_t(kernels::lut_quant_blocks(g.cols[0] / g.vec_dim)) : 0;
  const int nv_in = g.cols[0] / g.vec_dim;
  auto token_luts = [&](int t) {  // token t's LUT row (t is on the LUT path: it has one)
    const std::size_t row = std::size_t(p.lut_slot[std::size_t(t)]);
    const std::size_t q_off = g.packed6 ? row * lut_in : 0;
    const std::size_t s_off = row * q_blocks;
    return std::pair<Lut, Lut>{
        Lut{p.lut_gate.data() + row * lut_in, p.lutq_gate.data() + q_off, p.lutq_scale_gate.data() + s_off},
        Lut{p.lut_up.data() + row * lut_in, p.lutq_up.data() + q_off, p.lutq_scale_up.data() + s_off}};
  };
  if (c.latent_dim > 0) {
    matvec_tokens(exec, w.latent_down, x, hid, n_tokens, p.xin.data(), lat);
    watch.add(profile::Stage::shared_ffn);
  }
  for (int t = 0; t < n_tokens; ++t) {
    if (by_matmul(t)) continue;
    const float* xin = c.latent_dim > 0 ? p.xin.data() + std::int64_t(t) * lat : x + std::int64_t(t) * hid;
    const auto [gate_lut, up_lut] = token_luts(t);
    build_lut(exec, ex.codebooks, g, Codebooks::book_id(*base, 0, 0, g.stages), xin, nv_in, gate_lut);
    build_lut(exec, ex.codebooks, g, Codebooks::book_id(*base, 1, 0, g.stages), xin, nv_in, up_lut);
    watch.lap(profile::Stage::lut_build);
  }

  // Each distinct expert once, in landing order, applied to every token that chose it.
  for (int begin = 0; begin < n_distinct;) {
    const int n = std::min(window, n_distinct - begin);
    for (int i = 0; i < n; ++i) {
      auto ready = acquire_checked(ex, layer, *base);
      watch.lap(profile::Stage::io_wait);
      if (!ready) return std::unexpected(ready.error());
      const int expert = p.distinct[std::size_t(begin + ready->index)];
      const int u0 = p.user_begin[std::size_t(expert)], u1 = p.user_begin[std::size_t(expert) + 1];
      // Users [u0, m) by matrix products (decode the expert once, multiply all of them), [m, u1)
      // by LUT. Each user's output lands in its own row of ys, so their order does not matter.
      int m = u0;
      if (per_token) {
        m = int(std::partition(p.users.begin() + u0, p.users.begin() + u1, [&](int u) { return by_matmul(u / K); }) -
                p.users.begin());
      } else if (expert_batch::wanted_by_count(g, u1 - u0)) {
        m = u1;
      }
      if (m > u0) {
        expert_batch::run(exec, c, ex, ready->view, c.latent_dim > 0 ? p.xin.data() : x, c.latent_dim > 0 ? lat : hid,
                          std::span<const int>(p.users.data() + u0, std::size_t(m - u0)), K, p.ys.data(), p, watch);
      }
      if (groups_tokens(g) && u1 - m >= 2) {
        // VQ4P: the LUT users in groups, each matrix's index read once per group.
        const ExpertGroupScratch group{p.group_rows, p.group_a.data(), p.group_b.data(), p.group_lut_down.data(),
                                       p.group_lutq_down.data(), p.group_lutq_scale_down.data()};
        for (int k0 = m; k0 < u1; k0 += p.group_rows) {
          const int n_group = std::min(p.group_rows, u1 - k0);
          std::array<Lut, sizing::kVq4pGroupTokens> gate_luts{}, up_luts{};
          std::array<float*, sizing::kVq4pGroupTokens> outs{};
          for (int i = 0; i < n_group; ++i) {
            const int u = p.users[std::size_t(k0 + i)];
            std::tie(gate_luts[std::size_t(i)], up_luts[std::size_t(i)]) = token_luts(u / K);
            outs[std::size_t(i)] = p.ys.data() + std::int64_t(u) * lat;
          }
          run_expert_tokens(exec, c, ex, ready->view, std::span<const Lut>(gate_luts.data(), std::size_t(n_group)),
                            std::span<const Lut>(up_luts.data(), std::size_t(n_group)), group,
                            std::span<float* const>(outs.data(), std::size_t(n_group)), watch);
        }
      } else {
        for (int k = m; k < u1; ++k) {
          const int u = p.users[std::size_t(k)];
          const auto [gate_lut, up_lut] = token_luts(u / K);
          run_expert(exec, c, ex, ready->view, gate_lut, up_lut, s, p.ys.data() + std::int64_t(u) * lat, watch);
        }
      }
    }
    ex.source.release_layer(layer);
    begin += n;
    if (begin < n_distinct) WASTE_TRY(request_window(begin));
  }
  watch.add(profile::Stage::other);

  // Per token: the weighted sum in selection order (as finish_moe), then the K3 latent norm.
  for (int t = 0; t < n_tokens; ++t) {
    const float* weights = p.weights.data() + std::int64_t(t) * K;
    const float* ys = p.ys.data() + std::int64_t(t) * K * lat;
    float* ysum = p.ysum.data() + std::int64_t(t) * lat;
    std::fill(ysum, ysum + lat, 0.0f);
    for (int j = 0; j < K; ++j) {
      const float wj = weights[j];
      const float* y = ys + std::int64_t(j) * lat;
      for (int i = 0; i < lat; ++i) ysum[i] += wj * y[i];
    }
    if (c.latent_dim > 0 && c.latent_norm) rms_norm(ysum, w.latent_norm.data(), lat, c.rms_eps, ysum);
  }
  const float* routed = p.ysum.data();
  if (c.latent_dim > 0) {
    matvec_tokens(exec, w.latent_up, p.ysum.data(), lat, n_tokens, p.routed.data(), hid);
    routed = p.routed.data();
  }
  // Shared experts on the full x of every token, trunk rows shared across the chunk.
  const std::int64_t total = std::int64_t(n_tokens) * hid;
  if (w.has_shared) {
    ffn_tokens(exec, c, w.shared, x, n_tokens, p.fa.data(), p.fb.data(), out);
    for (std::int64_t i = 0; i < total; ++i) out[i] = routed[i] + out[i];
  } else {
    std::memcpy(out, routed, std::size_t(total) * sizeof(float));
  }
  watch.lap(profile::Stage::shared_ffn);
  return ok();
}

}  // namespace waste::forward
