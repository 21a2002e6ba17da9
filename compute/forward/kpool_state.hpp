// The k-pool DSA indexer's shape and per-sequence state (kpool_indexer.hpp has the maths and
// the indexer itself). Apart so that model::RunState, which holds one state per MLA layer, needs
// nothing of the forward pass.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shared/result.hpp"

namespace waste::forward {

class KpoolIndexer;

// The indexer's shape, from the config keys index_n_heads, index_head_dim, index_kpool,
// index_topk, index_kpool_always_select_tail and the model's hidden_size, q_lora_rank.
struct KpoolIndexerShape {
  int heads = 0;     // index_n_heads
  int head_dim = 0;  // index_head_dim
  int kpool = 0;     // index_kpool: tokens per pool
  int topk = 0;      // index_topk: tokens selected (topk / kpool pools), a multiple of kpool
  int hidden = 0;    // hidden_size
  int q_lora = 0;    // q_lora_rank (the indexer's query comes from the q_lora residual)

  // Errors (Errc::format): "kpool indexer: index_n_heads must be positive, found 0", the same for
  // index_head_dim, index_kpool, hidden_size and q_lora_rank (the indexer needs q_lora);
  // "kpool indexer: index_topk (10) must be a positive multiple of index_kpool (4)";
  // "kpool indexer: index_kpool_always_select_tail false is not supported" (the first tokens
  // would attend nothing).
  static Result<KpoolIndexerShape> make(int heads, int head_dim, int kpool, int topk, int hidden, int q_lora,
                                        bool always_select_tail = true);

  [[nodiscard]] int select_pools() const { return topk / kpool; }
  // The most positions one token attends: topk pooled tokens + a tail of up to kpool - 1.
  [[nodiscard]] int max_selected() const { return topk + kpool - 1; }
};

// One sequence's indexer state for one MLA layer: the key of every complete pool and the k and
// gate rows of the pool being filled. Sized once for ctx_tokens; nothing allocates afterwards.
// A session saves buffer() and tokens(); restoring writes buffer() back and calls set_tokens().
class KpoolIndexerState {
 public:
  // Errors (Errc::argument): "kpool indexer: ctx_tokens must be positive, found 0".
  static Result<KpoolIndexerState> create(const KpoolIndexerShape& shape, int ctx_tokens);
  // What create() allocates, for the memory plan: head_dim floats per complete pool of the
  // context (128 B per token at GLM's 128 dims and pools of 4) plus 2 * kpool * head_dim floats
  // for the pool being filled.
  [[nodiscard]] static std::uint64_t bytes(const KpoolIndexerShape& shape, int ctx_tokens);

  void reset() { tokens_ = 0; }
  [[nodiscard]] int tokens() const { return tokens_; }  // tokens appended = next position
  void set_tokens(int n) { tokens_ = n; }
  [[nodiscard]] int ctx_tokens() const { return ctx_tokens_; }
  [[nodiscard]] int complete_pools() const { return tokens_ / kpool_; }
  // Pool p's key at [p * head_dim], p < complete_pools().
  [[nodiscard]] const float* pool_keys() const { return buffer_.data(); }
  [[nodiscard]] std::span<float> buffer() { return buffer_; }
  [[nodiscard]] std::span<const float> buffer() const { return buffer_; }
  [[nodiscard]] std::uint64_t allocated_bytes() const { return buffer_.capacity() * sizeof(float); }

 private:
  friend class KpoolIndexer;
  std::vector<float> buffer_;  // [max_pools][D] pool keys, then [kpool][D] k, then [kpool][D] gate
  int tokens_ = 0;
  int ctx_tokens_ = 0;
  int kpool_ = 1;
  int head_dim_ = 0;
  std::int64_t max_pools_ = 0;
};

}  // namespace waste::forward
