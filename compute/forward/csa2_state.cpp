// CSA2's shape and role checks and its per-sequence state (csa2_state.hpp).
#include "compute/forward/csa2_state.hpp"

#include <string>

namespace waste::forward {
namespace {

Status positive(const char* key, int v) {
  if (v > 0) return ok();
  return make_error(Errc::format, std::string("csa2: ") + key + " must be positive, found " + std::to_string(v));
}

}  // namespace

Status Csa2Shape::check() const {
  WASTE_TRY(positive("hidden_size", hidden));
  WASTE_TRY(positive("num_attention_heads", heads));
  WASTE_TRY(positive("head_dim", head_dim));
  WASTE_TRY(positive("qk_rope_head_dim", rope_dim));
  WASTE_TRY(positive("q_lora_rank", q_lora));
  WASTE_TRY(positive("o_groups", o_groups));
  WASTE_TRY(positive("o_lora_rank", o_lora));
  WASTE_TRY(positive("sliding_window", window));
  WASTE_TRY(positive("index_n_heads", index_heads));
  WASTE_TRY(positive("index_head_dim", index_head_dim));
  WASTE_TRY(positive("index_topk", index_topk));
  WASTE_TRY(positive("candidate_topk_blocks", candidate_blocks));
  WASTE_TRY(positive("candidate_block_size", candidate_block_size));
  if (rope_dim % 2 != 0 || rope_dim > head_dim || rope_dim > index_head_dim) {
    return make_error(Errc::format, "csa2: qk_rope_head_dim (" + std::to_string(rope_dim) +
                                        ") must be even and at most head_dim (" + std::to_string(head_dim) +
                                        ") and index_head_dim (" + std::to_string(index_head_dim) + ")");
  }
  if (heads % o_groups != 0) {
    return make_error(Errc::format, "csa2: num_attention_heads (" + std::to_string(heads) +
                                        ") must be a multiple of o_groups (" + std::to_string(o_groups) + ")");
  }
  return ok();
}

Status Csa2Role::check() const {
  if (ratio < 0) return make_error(Errc::format, "csa2: compress ratio " + std::to_string(ratio) + " is negative");
  if (kv_source && ratio == 0) return make_error(Errc::format, "csa2: a KV source needs a compress ratio above 0");
  if (index_source && ratio == 0) {
    return make_error(Errc::format, "csa2: an index source needs a compress ratio above 0");
  }
  if (candidate_source && !index_source) {
    return make_error(Errc::format, "csa2: the candidate source must be an index source");
  }
  if (uses_candidates && (!index_source || candidate_source)) {
    return make_error(Errc::format, "csa2: only an index source other than the candidate source uses candidates");
  }
  return ok();
}

std::uint64_t Csa2Window::bytes(const Csa2Shape& shape) {
  return std::uint64_t(shape.window) * std::uint64_t(shape.head_dim) * sizeof(float);
}

Result<Csa2Window> Csa2Window::create(const Csa2Shape& shape) {
  WASTE_TRY(shape.check());
  Csa2Window w;
  w.window_ = shape.window;
  w.dim_ = shape.head_dim;
  w.buffer_.assign(bytes(shape) / sizeof(float), 0.0f);
  return w;
}

std::uint64_t Csa2Source::bytes(const Csa2Shape& shape, int ratio, bool index_keys, int ctx_tokens) {
  if (ratio <= 0 || ctx_tokens <= 0) return 0;
  const std::uint64_t groups = std::uint64_t(ctx_tokens / ratio);
  const std::uint64_t per_group =
      std::uint64_t(shape.head_dim) + (index_keys ? std::uint64_t(shape.index_head_dim) : 0);
  return (groups * per_group + 2 * std::uint64_t(ratio) * std::uint64_t(shape.head_dim)) * sizeof(float);
}

Result<Csa2Source> Csa2Source::create(const Csa2Shape& shape, int ratio, bool index_keys, int ctx_tokens) {
  WASTE_TRY(shape.check());
  if (ctx_tokens <= 0) {
    return make_error(Errc::argument, "csa2: ctx_tokens must be positive, found " + std::to_string(ctx_tokens));
  }
  if (ratio <= 0) {
    return make_error(Errc::argument, "csa2: a source needs a compress ratio above 0, found " + std::to_string(ratio));
  }
  Csa2Source s;
  s.ctx_tokens_ = ctx_tokens;
  s.ratio_ = ratio;
  s.dim_ = shape.head_dim;
  s.index_dim_ = index_keys ? shape.index_head_dim : 0;
  s.max_groups_ = ctx_tokens / ratio;
  s.buffer_.assign(bytes(shape, ratio, index_keys, ctx_tokens) / sizeof(float), 0.0f);
  return s;
}

}  // namespace waste::forward
