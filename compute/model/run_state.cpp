#include "compute/model/run_state.hpp"

#include <algorithm>
#include <limits>

#include "shared/memory/client_sizing.hpp"

namespace waste::model {

forward::Csa2Shape csa2_shape(const ModelConfig& c) {
  forward::Csa2Shape s;
  s.hidden = c.hidden;
  s.heads = c.n_heads;
  s.head_dim = c.head_dim;
  s.rope_dim = c.qk_rope;
  s.q_lora = c.q_lora;
  s.o_groups = c.o_groups;
  s.o_lora = c.o_lora_rank;
  s.window = c.sliding_window;
  s.index_heads = c.index_n_heads;
  s.index_head_dim = c.index_head_dim;
  s.index_topk = c.index_topk;
  s.candidate_blocks = c.candidate_topk_blocks;
  s.candidate_block_size = c.candidate_block_size;
  s.eps = c.rms_eps;
  s.main_rope = RopeConfig{.enabled = true, .theta = c.rope.theta};
  s.compress_rope = c.rope;
  s.compress_rope.enabled = true;
  if (c.compress_rope_theta > 0.0) s.compress_rope.theta = c.compress_rope_theta;
  return s;
}

Result<RunState> RunState::create(const ModelConfig& c, int ctx_tokens) {
  if (ctx_tokens < 1) {
    return make_error(Errc::argument, "ctx_tokens " + std::to_string(ctx_tokens) + " must be at least 1");
  }
  RunState s;
  s.ctx_tokens_ = ctx_tokens;
  s.latent_width_ = c.kv_lora + c.qk_rope;
  // Every count from the sizing the memory plan sums (shared/memory/client_sizing).
  const sizing::StateSizes z = sizing::state_sizes(c, std::uint64_t(ctx_tokens));
  s.conv_ring_floats_ = int(z.conv_ring);
  const std::size_t mla_floats = std::size_t(z.latent);
  if (c.n_mla_layers() > 0 &&
      mla_floats > std::size_t(std::numeric_limits<std::int64_t>::max()) / sizeof(float) / c.n_mla_layers()) {
    return make_error(Errc::argument, "ctx_tokens " + std::to_string(ctx_tokens) + " is too large");
  }
  s.layers_.resize(std::size_t(c.n_layers));
  for (int L = 0; L < c.n_layers; ++L) {
    Layer& layer = s.layers_[L];
    layer.kda = c.is_kda(L);
    layer.csa = c.is_csa(L);
    if (layer.csa) {
      const forward::Csa2Shape shape = csa2_shape(c);
      auto window = forward::Csa2Window::create(shape);
      if (!window) return std::unexpected(window.error().with_context("layer " + std::to_string(L)));
      layer.window = std::move(*window);
      if (std::find(c.kv_source_layer_ids.begin(), c.kv_source_layer_ids.end(), L) != c.kv_source_layer_ids.end()) {
        auto source = forward::Csa2Source::create(shape, c.compress_ratios[std::size_t(L)],
                                                  !c.index_source_layer_ids.empty(), ctx_tokens);
        if (!source) return std::unexpected(source.error().with_context("layer " + std::to_string(L)));
        layer.source = std::move(*source);
      }
    } else if (layer.kda) {
      layer.kda_s.assign(std::size_t(z.kda_state), 0.0f);
      layer.conv.assign(3 * std::size_t(z.conv_ring), 0.0f);
    } else {
      layer.latent.assign(mla_floats, 0.0f);
      if (c.has_indexer()) {
        auto shape = forward::KpoolIndexerShape::make(c.index_n_heads, c.index_head_dim, c.index_kpool, c.index_topk,
                                                      c.hidden, c.q_lora, c.index_kpool_always_select_tail);
        if (!shape) return std::unexpected(shape.error());
        auto index = forward::KpoolIndexerState::create(*shape, ctx_tokens);
        if (!index) return std::unexpected(index.error());
        layer.indexed = true;
        layer.index = std::move(*index);
      }
    }
  }
  if (c.uses_engram()) s.ngram_.emplace(c.engram_max_ngram_size);
  s.max_blocks_ = z.max_blocks;
  s.blocks_.assign(std::size_t(z.blocks), 0.0f);
  s.hidden_.assign(std::size_t(z.hidden), 0.0f);
  return s;
}

std::uint64_t RunState::allocated_bytes() const {
  std::uint64_t n = 0;
  std::uint64_t index = 0;
  for (const Layer& layer : layers_) {
    n += layer.kda_s.capacity() + layer.conv.capacity() + layer.latent.capacity();
    index += layer.index.allocated_bytes() + layer.window.buffer().size() * sizeof(float) +
             (layer.source ? layer.source->buffer().size() * sizeof(float) : 0);
  }
  n += blocks_.capacity() + hidden_.capacity();
  return n * sizeof(float) + index;
}

void RunState::reset() {
  for (Layer& layer : layers_) {
    std::fill(layer.kda_s.begin(), layer.kda_s.end(), 0.0f);
    std::fill(layer.conv.begin(), layer.conv.end(), 0.0f);
    // Latent slots >= position are never read, but zeroing keeps a reset state byte-identical
    // to a fresh one (what a saved session compares against).
    std::fill(layer.latent.begin(), layer.latent.end(), 0.0f);
    std::ranges::fill(layer.index.buffer(), 0.0f);
    layer.index.reset();
    std::ranges::fill(layer.window.buffer(), 0.0f);
    layer.window.reset();
    if (layer.source) {
      std::ranges::fill(layer.source->buffer(), 0.0f);
      layer.source->reset();
    }
  }
  if (ngram_) ngram_->reset();
  std::fill(blocks_.begin(), blocks_.end(), 0.0f);
  std::fill(hidden_.begin(), hidden_.end(), 0.0f);
  position_ = 0;
  n_blocks_ = 0;
  broken_.clear();
}

void RunState::mark_broken(int position, const std::string& why) {
  if (!broken_.empty()) return;  // the first failure is the one that explains the state
  broken_ = "a pass at position " + std::to_string(position) + " failed mid-way (" + why + ")";
}

Status RunState::check_usable() const {
  if (broken_.empty()) return ok();
  return make_error(Errc::argument, "sequence state unusable: " + broken_ + "; reset the sequence or load a session");
}

std::span<float> RunState::conv_ring(int layer, ConvRing which) {
  return std::span<float>(layers_[layer].conv).subspan(std::size_t(which) * conv_ring_floats_, conv_ring_floats_);
}

std::span<const float> RunState::conv_ring(int layer, ConvRing which) const {
  return std::span<const float>(layers_[layer].conv).subspan(std::size_t(which) * conv_ring_floats_, conv_ring_floats_);
}

}  // namespace waste::model
