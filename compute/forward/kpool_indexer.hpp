// The k-pool sparse-attention indexer of GLM-5.3-Flash's MLA layers (DSA, "k-pool" flavour;
// model-families.md §1.1). Per MLA layer and sequence it keeps one key per complete pool of
// `kpool` tokens and, for every query token, picks the `topk / kpool` best-scoring complete pools
// it can see plus the tokens of its unfilled last pool; MLA then attends only those positions
// (mla.hpp, MlaSelect). While a token sees no more than `topk / kpool` complete pools it selects
// every position before it: exactly dense attention (below `topk` tokens).
//
// Per token u (x_u the layer's normed input, r_u = rms(q_a x_u) the MLA q_lora residual):
//   k_u = LayerNorm(wk x_u) (weight and bias, eps 1e-6)        g_u = compress_gate x_u   [D]
//   pool p = tokens p*kpool .. p*kpool+kpool-1, complete pools only:
//     K_p[c] = sum_j softmax_j(g_{p*kpool+j}[c] + ape[j][c]) * k_{p*kpool+j}[c]   (per channel c)
//   query t at position pos: q_h = (wq_b r_t)[h] [H][D], w_h = (weights_proj x_t)[h] / sqrt(H)
//     score_t(p) = sum_h w_h * relu(q_h . K_p / sqrt(D))   over pools with p*kpool+kpool-1 <= pos
//   selected = the topk/kpool highest scores (ties: the lower pool index first; HF's torch.topk
//   leaves the order of equal scores unspecified, e.g. pools whose every head's relu is 0), every
//   candidate when there are no more; positions = the selected pools' tokens, ascending, then
//   the tail pos+1-(pos+1)%kpool .. pos (index_kpool_always_select_tail).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/forward/kpool_state.hpp"
#include "compute/forward/mla.hpp"
#include "compute/forward/ops.hpp"
#include "compute/forward/scratch.hpp"
#include "shared/result.hpp"

namespace waste::forward {

// The indexer's tensors of one MLA layer, by HF name under model.layers.N.self_attn.indexer.
// The matrices may be any trunk format the matvec kernels take (F32, Q8G, Q4G).
struct KpoolIndexerWeights {
  kernels::QuantMatrix wq_b;          // wq_b.weight                 [heads * head_dim, q_lora]
  kernels::QuantMatrix wk;            // wk.weight                   [head_dim, hidden]
  std::vector<float> k_norm_w;        // k_norm.weight               [head_dim]
  std::vector<float> k_norm_b;        // k_norm.bias                 [head_dim]
  kernels::QuantMatrix weights_proj;  // weights_proj.weight         [heads, hidden]
  kernels::QuantMatrix compress_gate; // index_kpool_compress_gate   [head_dim, hidden]
  std::vector<float> compress_ape;    // index_kpool_compress_ape    [kpool][head_dim]

  // Errors (Errc::format) name the tensor: "kpool indexer: wk: expected [8, 64], found [8, 63]",
  // "kpool indexer: k_norm.bias: expected 8 values, found 7".
  [[nodiscard]] Status check(const KpoolIndexerShape& shape) const;
};

// The indexer's working buffers for calls of up to `tokens` tokens at contexts up to ctx_tokens.
struct KpoolIndexerScratch {
  int tokens = 0;
  std::int64_t max_pools = 0;
  std::vector<float> q;        // [T][heads * head_dim]
  std::vector<float> k;        // [T][head_dim]
  std::vector<float> gate;     // [T][head_dim]
  std::vector<float> w;        // [T][heads]
  std::vector<float> dots;     // [heads][max_pools]  q_h . K_p
  std::vector<float> score;    // [max_pools]
  std::vector<int> order;      // [max_pools]
  std::vector<int> positions;  // [T][max_selected]  the selection mla_forward reads
  std::vector<int> counts;     // [T]
  void resize(const KpoolIndexerShape& shape, int ctx_tokens, int tokens = 1);
  [[nodiscard]] static std::uint64_t bytes(const KpoolIndexerShape& shape, int ctx_tokens, int tokens);
  [[nodiscard]] std::uint64_t allocated_bytes() const;
};

// The indexer of one MLA layer: shape and weights bound once, then `select` per call.
class KpoolIndexer {
 public:
  // Checks the weights against the shape (KpoolIndexerWeights::check). Both must outlive this.
  static Result<KpoolIndexer> bind(const KpoolIndexerShape& shape, const KpoolIndexerWeights& weights);

  // Appends tokens pos0 .. pos0+n-1 of one sequence to `state` (x: their layer inputs [n][hidden],
  // q_resid: their rms(q_a x) [n][q_lora]) and writes token t's attended positions, ascending,
  // to s.positions[(first_row + t) * max_selected() ...], their number to s.counts[first_row + t].
  // Token t is causal: it sees the pools and tail up to its own position, also inside the chunk.
  // Errors (Errc::argument): "kpool indexer: the call starts at position 5 but the state holds 4
  // tokens", "kpool indexer: 70 tokens exceed the scratch's 64",
  // "kpool indexer: position 4096 exceeds the state's 4096 tokens",
  // "kpool indexer: rows 3..4 exceed the scratch's 4 tokens".
  Status select(const Exec& exec, const float* x, const float* q_resid, int n, int pos0, KpoolIndexerState& state,
                KpoolIndexerScratch& s, int first_row = 0) const;
  // select's argument checks alone (the errors above), before anything is written.
  [[nodiscard]] Status check_call(int n, int pos0, const KpoolIndexerState& state,
                                  const KpoolIndexerScratch& s) const;

  [[nodiscard]] const KpoolIndexerShape& shape() const { return shape_; }

 private:
  KpoolIndexer(const KpoolIndexerShape& shape, const KpoolIndexerWeights& weights) : shape_(shape), w_(&weights) {}
  void append(const float* k, const float* gate, KpoolIndexerState& state) const;
  void select_token(const Exec& exec, const float* q, const float* w, int pos, const KpoolIndexerState& state,
                    KpoolIndexerScratch& s, int* positions, int* count) const;

  KpoolIndexerShape shape_;
  const KpoolIndexerWeights* w_;
};

// The entry point for an MLA layer with the indexer: mla_forward (chunk form, one sequence) with
// `indexer` choosing each token's positions from the q_lora residual MLA computes. Tokens
// pos0 .. pos0+n_tokens-1 go into both the latent cache and `state`; x is the layer's normed
// input, as for mla_forward. Errors: check_call's, before anything is written, and
// "kpool indexer: the MLA's hidden_size 64 / q_lora_rank 0 differ from the indexer's 64 / 32".
Status mla_forward_kpool(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w,
                         const KpoolIndexer& indexer, const float* x, int n_tokens, int pos0, float* latent_cache,
                         MlaScratch& s, KpoolIndexerState& state, KpoolIndexerScratch& is, float* out);
// The same for a batch (mla_forward's span form): token t of seqs, at seqs[t].pos, goes into
// the indexer state state_of(t) of its sequence (tokens of one sequence in order, as in a batch).
// Errors: the hidden_size / q_lora_rank mismatch above, "kpool indexer: 70 tokens exceed the
// scratch's 64", and a token's select errors (its state then unchanged from that token on).
Status mla_forward_kpool(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w,
                         const KpoolIndexer& indexer, const float* x, std::span<const TokenSeq> seqs, int layer,
                         MlaScratch& s, FunctionRef<KpoolIndexerState&(int t)> state_of, KpoolIndexerScratch& is,
                         float* out);

}  // namespace waste::forward
