// DeepSeek-V4.1-Flash's CSA2 attention block (model-families.md §2.1; transformers
// deepseek_v41): MQA over one K=V latent per token, from a 128-token sliding window on every
// layer plus, on layers with a compressed branch, the index-selected entries of the shared
// compressed cache of the layer's KV source.
//
// Per token at position p (x the layer's normed input, rms(v) = v / sqrt(mean(v^2) + eps)):
//   r = rms(wq_a x) * q_norm                                q_lora residual (the indexer's too)
//   q_h = rope_p(wq_b r)[h]  [heads][head_dim]              rope_p: the last rope_dim dims of a
//   kv = rope_p(rms(wkv x) * kv_norm)  [head_dim]           vector, pairs (2i, 2i+1) rotated by
//                                                           p * inv_freq_i (compress schedule when
//                                                           ratio > 0, else main)
//   the window: kv of positions max(0, p-window+1) .. p (ring in Csa2Window)
// KV source (compressor), group j = tokens j*ratio .. j*ratio+ratio-1, done when p = j*ratio+ratio-1:
//   ratio 1: l_j = rms(c_wkv x_p) * c_norm
//   ratio r: l_j[c] = rms(sum_i softmax_i(c_wgate x_i)[c] * (c_wkv x_i)[c]) * c_norm  (per channel)
//   key_j = rope_{j*ratio}(rms(i_wk l_j) * i_k_norm)       (when the source runs the indexer)
//   C_j = rope_{j*ratio}(l_j)                               both with the compress schedule
// Index source, over the source's groups visible at p (j < (p+1)/ratio):
//   iq_h = rope_p(i_wq_b r)[h], w_h = (i_weights_proj x)[h] / sqrt(index_heads)
//   score(j) = sum_h w_h * relu(iq_h . key_j) / sqrt(index_head_dim)
//   candidate source: block b = groups b*B .. b*B+B-1 scores max_j score(j); the block holding
//     the newest visible group is pinned (+inf); the candidate_blocks best blocks are kept
//   an index source after the candidate source ranks only groups inside the kept blocks
//   selection = the index_topk best groups (all of them when there are fewer)
//   Ties, blocks and groups: the higher score first, the lower index on equal scores (torch's
//   topk leaves the order of equal scores unspecified); NaN scores rank as -inf, never kept.
// Every layer with ratio > 0 attends the selection of the last index source of the call.
// Attention, per head h, over the window entries then the selected C_j (K = V = the vector):
//   s_i = q_h . k_i / sqrt(head_dim); o_h = sum_i exp(s_i) v_i / (sum_i exp(s_i) + exp(sink_h))
//   o_h <- rope_{-p}(o_h) (the conjugate rotation removes the query's rope from the output)
//   out = wo_b [wo_a_g (o of group g's heads)]_g            heads in o_groups blocks, each wo_a_g
//                                                           (rows g*o_lora ..) to o_lora, then wo_b
//
// Index keys: every index source scores against the running keys of the latest KV source at or
// before it (the transformers reference republishes them on every call). The vendor's inference
// code keeps one module-level key slot republished only when a group completes, so on alternate
// decode steps its layers 2/8/14 score against layer 20's keys; this block does not reproduce
// that. The vendor's fake quantization (window kv fp8, compressed kv and index q/k fp4), which
// the transformers reference also applies, is not reproduced either: everything is f32.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/forward/csa2_state.hpp"
#include "compute/forward/ops.hpp"
#include "compute/runtime/function_ref.hpp"
#include "shared/result.hpp"

namespace waste::forward {

// One layer's tensors, by their transformers names under model.layers.N.attn. The matrices may
// be any trunk format the matvec kernels take (F32, Q8G, Q4G).
struct Csa2Weights {
  kernels::QuantMatrix wq_a;      // wq_a.weight          [q_lora, hidden]
  std::vector<float> q_norm;      // q_norm.weight        [q_lora]
  kernels::QuantMatrix wq_b;      // wq_b.weight          [heads * head_dim, q_lora]
  kernels::QuantMatrix wkv;       // wkv.weight           [head_dim, hidden]
  std::vector<float> kv_norm;     // kv_norm.weight       [head_dim]
  kernels::QuantMatrix wo_a;      // wo_a.weight          [o_groups * o_lora, heads * head_dim / o_groups]
  kernels::QuantMatrix wo_b;      // wo_b.weight          [hidden, o_groups * o_lora]
  std::vector<float> attn_sink;   // attn_sink            [heads]
  // KV sources: compressor.*
  kernels::QuantMatrix c_wkv;     // compressor.wkv.weight    [head_dim, hidden]
  kernels::QuantMatrix c_wgate;   // compressor.wgate.weight  [head_dim, hidden], ratio > 1 only
  std::vector<float> c_norm;      // compressor.norm.weight   [head_dim]
  // Index sources: indexer.*
  kernels::QuantMatrix i_wq_b;          // indexer.wq_b.weight          [index_heads * index_head_dim, q_lora]
  kernels::QuantMatrix i_weights_proj;  // indexer.weights_proj.weight  [index_heads, hidden]
  kernels::QuantMatrix i_wk;            // indexer.wk.weight            [index_head_dim, head_dim], KV sources
  std::vector<float> i_k_norm;          // indexer.k_norm.weight        [index_head_dim], KV sources

  // Only the tensors the role uses are checked. Errors (Errc::format) name the tensor:
  // "csa2: wq_a: expected [24, 64], found [24, 63]", "csa2: compressor.wgate: expected [32, 64],
  // found none", "csa2: attn_sink: expected 4 values, found 3".
  [[nodiscard]] Status check(const Csa2Shape& shape, const Csa2Role& role) const;
};

// The per-call record the layer loop shares between layers, like the reference's per-forward
// dict: an index source writes each token's selected groups (and the candidate source its kept
// blocks); the layers after it read them. reset() at the start of every call.
struct Csa2Selection {
  static constexpr int kBatch = -2;  // pos0 / cand_pos0 of a selection written by a batch call
  int tokens = 0;           // capacity in tokens
  int topk = 0;             // index_topk: row stride of `groups`
  int max_blocks = 0;       // candidate_topk_blocks: row stride of `blocks`
  int pos0 = -1, n = 0;     // the call the selection was written for (n = 0: none yet)
  int cand_pos0 = -1, cand_n = 0;
  const Csa2Source* source = nullptr;  // whose groups the selection indexes
  std::vector<int> groups;  // [tokens][topk] selected groups, ascending
  std::vector<int> count;   // [tokens]
  std::vector<int> blocks;  // [tokens][candidate_blocks] kept candidate blocks, ascending
  std::vector<int> block_count;  // [tokens]
  std::vector<const Csa2Source*> row_source;  // [tokens] whose groups row t indexes

  void resize(const Csa2Shape& shape, int tokens);
  void reset() { pos0 = cand_pos0 = -1, n = cand_n = 0, source = nullptr; }
  [[nodiscard]] static std::uint64_t bytes(const Csa2Shape& shape, int tokens);
};

// The block's working buffers for calls of up to `tokens` tokens at contexts up to ctx_tokens.
struct Csa2Scratch {
  int tokens = 0;
  std::int64_t max_groups = 0;
  std::vector<float> q_resid;  // [T][q_lora]
  std::vector<float> q;        // [T][heads * head_dim]
  std::vector<float> kv;       // [T][head_dim]
  std::vector<float> ckv;      // [T][head_dim]   compressor kv
  std::vector<float> cgate;    // [T][head_dim]   compressor gate
  std::vector<float> iq;       // [T][index_heads * index_head_dim]
  std::vector<float> iw;       // [T][index_heads]
  std::vector<float> attn;     // [T][heads * head_dim]
  std::vector<float> olora;    // [T][o_groups * o_lora]
  std::vector<float> logits;   // [heads][window + index_topk]
  std::vector<float> score;    // [2 * max_groups]  group scores, then block scores
  std::vector<int> cand;       // [max_groups]  the groups being ranked
  std::vector<int> rank;       // [max_groups]
  std::vector<float> latent;   // [head_dim + index_head_dim + 5 * rope_dim / 2]  a group's latent,
                               // key, rotations
  void resize(const Csa2Shape& shape, int ctx_tokens, int tokens = 1);
  [[nodiscard]] static std::uint64_t bytes(const Csa2Shape& shape, int ctx_tokens, int tokens);
};

// One layer's CSA2 attention: shape, role and weights bound once, then `forward` per call.
class Csa2Block {
 public:
  // Checks the shape, the role and the weights (their check()s). Shape and weights must outlive this.
  static Result<Csa2Block> bind(const Csa2Shape& shape, const Csa2Role& role, const Csa2Weights& weights);

  // Tokens pos0 .. pos0+n-1 of one sequence (x: their normed inputs [n][hidden]) through the
  // layer: out [n][hidden]. `window` is this layer's; `source` the latest KV source's at or
  // before this layer (this layer's own when it is one; it appends there; unused at ratio 0);
  // `sel` the call's shared selection (an index source writes it, the other layers with
  // ratio > 0 read it). Token t sees exactly what it would see alone: its own window, the
  // groups complete at its position, all inside the call too.
  // Errors (Errc::argument), before anything is written: "csa2: the call starts at position 5
  // but the window holds 4 tokens", "csa2: 70 tokens exceed the scratch's 64", "csa2: the layer
  // has compress ratio 2 but no source", "csa2: the layer's compress ratio 2 differs from its
  // source's 1", "csa2: the source holds 4 tokens, expected 5" (a source must be at pos0, a
  // consumer's at pos0 + n: its source layer ran the call first), "csa2: the source has no
  // index keys", "csa2: position 4096 exceeds the source's 4096 tokens", "csa2: no index
  // source has selected for tokens 5..11", "csa2: no candidate blocks for tokens 5..11".
  Status forward(const Exec& exec, const float* x, int n, int pos0, Csa2Window& window, Csa2Source* source,
                 Csa2Selection& sel, Csa2Scratch& s, float* out) const;
  // forward's argument checks alone (the errors above), before anything is written.
  [[nodiscard]] Status check_call(int n, int pos0, const Csa2Window& window, const Csa2Source* source,
                                  const Csa2Selection& sel, const Csa2Scratch& s) const;
  // The same for a batch: token t (x row t) of some sequence at positions[t], with that
  // sequence's window_of(t) and source_of(t) (tokens of one sequence in order, at consecutive
  // positions, as in a batch); the selection's row t is token t's. Token t gets the bits it gets
  // alone. Errors (Errc::argument): the count and source errors above, "csa2: batch token 3 is
  // at position 7 but its window holds 6 tokens", "csa2: batch token 3 is at position 7 but its
  // source holds 7 tokens" (a source must be at the position, a consumer's past it), "csa2: no
  // index source has selected for batch token 3" ("... for this batch of 4 tokens" before
  // anything is written), "csa2: no candidate blocks for batch token 3";
  // a token's error leaves the tokens before it written.
  Status forward(const Exec& exec, const float* x, std::span<const int> positions,
                 FunctionRef<Csa2Window&(int t)> window_of, FunctionRef<Csa2Source*(int t)> source_of,
                 Csa2Selection& sel, Csa2Scratch& s, float* out) const;

  [[nodiscard]] const Csa2Shape& shape() const { return *shape_; }
  [[nodiscard]] const Csa2Role& role() const { return role_; }

 private:
  Csa2Block(const Csa2Shape& shape, const Csa2Role& role, const Csa2Weights& weights);
  [[nodiscard]] Status check_token(int t, int pos, const Csa2Window& window, const Csa2Source* source,
                                   const Csa2Selection& sel, const Csa2Scratch& s) const;
  void project(const Exec& exec, const float* x, int n, Csa2Scratch& s) const;
  void step(const Exec& exec, int t, int pos, Csa2Window& window, Csa2Source* source, Csa2Selection& sel,
            Csa2Scratch& s) const;
  void output(const Exec& exec, int n, Csa2Scratch& s, float* out) const;
  void compress(const Exec& exec, const float* ckv, const float* cgate, Csa2Source& src, Csa2Scratch& s) const;
  void select(const Exec& exec, int t, int pos, const Csa2Source& src, Csa2Selection& sel, Csa2Scratch& s) const;
  void attend(const Exec& exec, int t, int pos, const Csa2Window& window, const Csa2Source* src,
              const Csa2Selection& sel, Csa2Scratch& s) const;

  const Csa2Shape* shape_;
  Csa2Role role_;
  const Csa2Weights* w_;
  std::vector<double> inv_freq_;     // the layer's q / kv / output schedule (rope_dim / 2)
  std::vector<double> c_inv_freq_;   // the compress schedule (groups, index keys and queries)
};

}  // namespace waste::forward
