// DeepSeek-V4.1's CSA2 attention: its shape, a layer's role, and one sequence's state (csa2.hpp
// has the maths and the block). Apart so that model::RunState, which will hold one window per
// layer and one source per KV-source layer, needs nothing of the forward pass.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shared/container/rope_config.hpp"
#include "shared/result.hpp"

namespace waste::forward {

class Csa2Block;

// The block's shape, from the config keys (real values in brackets): hidden_size [5120],
// num_attention_heads [64], head_dim [512] (the K=V latent too), qk_rope_head_dim [64],
// q_lora_rank [1280], o_groups [8], o_lora_rank [1024], sliding_window [128], index_n_heads
// [32], index_head_dim [128], index_topk [512], candidate_topk_blocks [2048],
// candidate_block_size [8], rms_norm_eps [1e-20]; the two rotary schedules: `main_rope` for
// window-only layers (rope_theta 10000, no YaRN) and `compress_rope` for layers with a compressed
// branch (compress_rope_theta 160000 + YaRN factor 16, original 65536, beta 32 / 1; its mscale
// is never applied).
struct Csa2Shape {
  int hidden = 0;
  int heads = 0;
  int head_dim = 0;
  int rope_dim = 0;
  int q_lora = 0;
  int o_groups = 0;
  int o_lora = 0;
  int window = 0;
  int index_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  int candidate_blocks = 0;      // candidate_topk_blocks
  int candidate_block_size = 0;  // candidate_block_size
  float eps = 1e-20f;
  RopeConfig main_rope;
  RopeConfig compress_rope;

  // Errors (Errc::format): "csa2: num_attention_heads must be positive, found 0" (the same for
  // every count above), "csa2: qk_rope_head_dim (7) must be even and at most head_dim (512) and
  // index_head_dim (128)", "csa2: num_attention_heads (6) must be a multiple of o_groups (4)".
  [[nodiscard]] Status check() const;
};

// What one layer does, decided once by the family from compress_ratios, kv_source_layer_ids,
// index_source_layer_ids and candidate_source_layer_id.
struct Csa2Role {
  int ratio = 0;                  // compress_ratios[L]: 0 window only, 1 projection, r > 1 pooling of r tokens
  bool kv_source = false;         // owns the compressor: appends to its Csa2Source
  bool index_source = false;      // runs the indexer: writes the call's selection
  bool candidate_source = false;  // the index source whose candidate blocks later ones score inside
  bool uses_candidates = false;   // an index source after the candidate source
  bool operator==(const Csa2Role&) const = default;

  // Errors (Errc::format): "csa2: compress ratio -1 is negative", "csa2: a KV source needs a
  // compress ratio above 0", "csa2: an index source needs a compress ratio above 0", "csa2: the
  // candidate source must be an index source", "csa2: only an index source other than the
  // candidate source uses candidates".
  [[nodiscard]] Status check() const;
};

// One sequence's sliding window of one layer: the rotated K=V latents of its last `window`
// tokens in a ring (position p in slot p % window). Fixed size, whatever the context.
// A session saves buffer() and tokens(); restoring writes buffer() back and calls set_tokens().
class Csa2Window {
 public:
  static Result<Csa2Window> create(const Csa2Shape& shape);
  [[nodiscard]] static std::uint64_t bytes(const Csa2Shape& shape);  // window * head_dim floats

  void reset() { tokens_ = 0; }
  [[nodiscard]] int tokens() const { return tokens_; }  // tokens appended = next position
  void set_tokens(int n) { tokens_ = n; }
  [[nodiscard]] int window() const { return window_; }
  // The latent of position p, for tokens() - window() <= p < tokens().
  [[nodiscard]] const float* row(int p) const { return buffer_.data() + std::int64_t(p % window_) * dim_; }
  [[nodiscard]] std::span<float> buffer() { return buffer_; }
  [[nodiscard]] std::span<const float> buffer() const { return buffer_; }

 private:
  friend class Csa2Block;
  std::vector<float> buffer_;  // [window][head_dim]
  int tokens_ = 0;
  int window_ = 1;
  int dim_ = 0;
};

// One sequence's compressed branch of one KV-source layer, read by every layer up to the next
// source: one rotated compressed latent per complete group of `ratio` tokens (group j rotated at
// position j * ratio with the compress schedule), the group's rotated index key when the source
// also runs the indexer, and the projected kv and gate rows of the group being filled (so chunked
// prefill equals token by token). Sized once for ctx_tokens; nothing allocates afterwards.
// A session saves buffer() and tokens(); restoring writes buffer() back and calls set_tokens().
class Csa2Source {
 public:
  // Errors (Errc::argument): "csa2: ctx_tokens must be positive, found 0", "csa2: a source
  // needs a compress ratio above 0, found 0".
  static Result<Csa2Source> create(const Csa2Shape& shape, int ratio, bool index_keys, int ctx_tokens);
  // What create() allocates, for the memory plan: (head_dim + index_head_dim if index_keys)
  // floats per complete group of the context, plus 2 * ratio * head_dim floats for the group
  // being filled.
  [[nodiscard]] static std::uint64_t bytes(const Csa2Shape& shape, int ratio, bool index_keys, int ctx_tokens);

  void reset() { tokens_ = 0; }
  [[nodiscard]] int tokens() const { return tokens_; }  // source tokens appended = next position
  void set_tokens(int n) { tokens_ = n; }
  [[nodiscard]] int ctx_tokens() const { return ctx_tokens_; }
  [[nodiscard]] int ratio() const { return ratio_; }
  [[nodiscard]] int groups() const { return tokens_ / ratio_; }  // complete groups
  [[nodiscard]] bool has_index_keys() const { return index_dim_ > 0; }
  // Group j's rotated latent [head_dim] and index key [index_head_dim], j < groups().
  [[nodiscard]] const float* kv(int j) const { return buffer_.data() + std::int64_t(j) * dim_; }
  [[nodiscard]] const float* index_key(int j) const {
    return buffer_.data() + max_groups_ * dim_ + std::int64_t(j) * index_dim_;
  }
  [[nodiscard]] std::span<float> buffer() { return buffer_; }
  [[nodiscard]] std::span<const float> buffer() const { return buffer_; }

 private:
  friend class Csa2Block;
  // [max_groups][head_dim] latents, [max_groups][index_head_dim] keys, then the group being
  // filled: [ratio][head_dim] kv rows and [ratio][head_dim] gate rows.
  std::vector<float> buffer_;
  int tokens_ = 0;
  int ctx_tokens_ = 0;
  int ratio_ = 1;
  int dim_ = 0;
  int index_dim_ = 0;
  std::int64_t max_groups_ = 0;
};

}  // namespace waste::forward
