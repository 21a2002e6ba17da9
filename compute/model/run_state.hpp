// RunState: everything one sequence carries from token to token, in one place so a session can
// be saved and restored (waste-v0-reference.md §6.1 lists the same pieces):
//   KDA layers: S (H x D x D f32, [head][key][value]) and the q/k/v conv rings (C x (K-1) each,
//               oldest sample first);
//   MLA layers: the latent cache, ctx_tokens x (kv_lora + rope) f32, slot t = token t, and with
//               GLM's DSA indexer (index_n_heads > 0) its k-pool state (forward::KpoolIndexerState);
//   CSA2 layers (DeepSeek-V4.1): a window ring per layer, the compressed branch per KV source;
//   Engram (DeepSeek-V4.1): the n-gram look-back, the compressed ids of the last N-1 tokens;
//   the position (next token index), the AttnRes block history of the last token, and the
//   residual stream x after the last layer.
// Sized once at creation; nothing here allocates afterwards.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/forward/csa2_state.hpp"
#include "compute/engram/ngram_hash.hpp"
#include "compute/forward/kpool_state.hpp"
#include "shared/container/model_config.hpp"
#include "shared/result.hpp"

namespace waste::model {

enum class ConvRing : int { q = 0, k = 1, v = 2 };

// DeepSeek-V4.1's CSA2 shape from its config: main rope rope_theta without YaRN, compress rope
// compress_rope_theta with the config's YaRN (no mscale), eps rms_norm_eps.
forward::Csa2Shape csa2_shape(const ModelConfig& c);

class RunState {
 public:
  // ctx_tokens bounds the MLA latent cache (and the position for every model).
  static Result<RunState> create(const ModelConfig& config, int ctx_tokens);

  void reset();  // zero state, position 0 (a broken state usable again)

  // A pass that fails after it began changing this state (an I/O error at layer 5 of 8, say)
  // leaves the recurrent parts - KDA, CSA2 windows and compressed sources, the DSA pools, the
  // n-gram look-back, the AttnRes blocks - advanced past position() while position() is not.
  // Forward marks the state broken then; every later pass on it is refused (check_usable())
  // until reset() or a session load replaces it. `why` is the failed pass's error.
  void mark_broken(int position, const std::string& why);
  [[nodiscard]] bool broken() const { return !broken_.empty(); }
  // ok(), or the error a pass on a broken state gets (names the position and the first failure).
  [[nodiscard]] Status check_usable() const;

  // Bytes of every buffer held (vector capacities); the memory plan's state_bytes covers it.
  [[nodiscard]] std::uint64_t allocated_bytes() const;

  [[nodiscard]] int position() const { return position_; }
  void set_position(int position) { position_ = position; }
  [[nodiscard]] int ctx_tokens() const { return ctx_tokens_; }
  [[nodiscard]] int n_layers() const { return static_cast<int>(layers_.size()); }
  [[nodiscard]] bool is_kda(int layer) const { return layers_[layer].kda; }

  // KDA layer: recurrent state [H][D][D] and one conv ring [C][K-1] per q/k/v.
  std::span<float> kda_state(int layer) { return layers_[layer].kda_s; }
  std::span<float> conv_ring(int layer, ConvRing which);
  [[nodiscard]] std::span<const float> conv_ring(int layer, ConvRing which) const;
  [[nodiscard]] std::span<const float> kda_state(int layer) const { return layers_[layer].kda_s; }
  // MLA layer: the whole latent cache [ctx_tokens][kv_lora + rope]; slots < position() are valid.
  std::span<float> latent_cache(int layer) { return layers_[layer].latent; }
  [[nodiscard]] std::span<const float> latent_cache(int layer) const { return layers_[layer].latent; }
  [[nodiscard]] int latent_width() const { return latent_width_; }
  // MLA layer of a model with the DSA indexer: its pooled keys and the pool being filled.
  [[nodiscard]] bool has_indexer(int layer) const { return layers_[layer].indexed; }
  forward::KpoolIndexerState& indexer_state(int layer) { return layers_[layer].index; }
  [[nodiscard]] const forward::KpoolIndexerState& indexer_state(int layer) const { return layers_[layer].index; }

  // CSA2 layer (DeepSeek-V4.1): its sliding-window ring; a KV-source layer's compressed branch
  // (nullptr for a layer that is no KV source).
  forward::Csa2Window& csa_window(int layer) { return layers_[layer].window; }
  [[nodiscard]] const forward::Csa2Window& csa_window(int layer) const { return layers_[layer].window; }
  forward::Csa2Source* csa_source(int layer) { return layers_[layer].source ? &*layers_[layer].source : nullptr; }
  [[nodiscard]] const forward::Csa2Source* csa_source(int layer) const {
    return layers_[layer].source ? &*layers_[layer].source : nullptr;
  }
  [[nodiscard]] bool is_csa(int layer) const { return layers_[layer].csa; }

  // Engram models (config.uses_engram()): the n-gram look-back the next token's rows hash
  // (compute/engram/ngram_hash.hpp); reset() starts a sequence (nothing to look back at).
  [[nodiscard]] bool has_ngram_history() const { return ngram_.has_value(); }
  engram::NgramHistory& ngram_history() { return *ngram_; }
  [[nodiscard]] const engram::NgramHistory& ngram_history() const { return *ngram_; }

  // AttnRes block history of the last token: n_blocks() x hidden.
  std::span<float> blocks() { return blocks_; }
  [[nodiscard]] std::span<const float> blocks() const { return blocks_; }
  [[nodiscard]] int n_blocks() const { return n_blocks_; }
  void set_n_blocks(int n) { n_blocks_ = n; }
  [[nodiscard]] int max_blocks() const { return max_blocks_; }

  // Residual stream after the last layer (before model.norm) of the last token.
  std::span<float> hidden() { return hidden_; }
  [[nodiscard]] std::span<const float> hidden() const { return hidden_; }

 private:
  struct Layer {
    bool kda = false;
    std::vector<float> kda_s;
    std::vector<float> conv;   // 3 rings back to back: q, k, v
    std::vector<float> latent;
    bool indexed = false;
    forward::KpoolIndexerState index;  // sized only when indexed
    bool csa = false;
    forward::Csa2Window window;                 // CSA2 layers
    std::optional<forward::Csa2Source> source;  // CSA2 KV-source layers
  };
  std::vector<Layer> layers_;
  std::optional<engram::NgramHistory> ngram_;  // Engram models only
  std::vector<float> blocks_;
  std::vector<float> hidden_;
  int position_ = 0;
  std::string broken_;  // why the state is unusable; empty = usable
  int ctx_tokens_ = 0;
  int latent_width_ = 0;
  int conv_ring_floats_ = 0;
  int n_blocks_ = 0;
  int max_blocks_ = 0;
};

}  // namespace waste::model
