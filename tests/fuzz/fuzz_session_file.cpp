// libFuzzer: a session file -> session::decode_into against the tiny model's RunState
// (header fields, per-layer body, MLA n_kv against the capacity, AttnRes blocks, exact size).
// A refusal must leave the state untouched; an accepted file must re-encode to itself.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "compute/model/run_state.hpp"
#include "compute/session/session_file.hpp"
#include "shared/container/model_config.hpp"

namespace {

waste::ModelConfig tiny_config() {
  // configs/presets/tiny.json's shape: KDA layers 0, 1, 3 and MLA layer 2, plus AttnRes so the
  // block history is part of the format under test.
  waste::ModelConfig c;
  c.n_layers = 4;
  c.hidden = 16;
  c.n_heads = 2;
  c.kv_lora = 8;
  c.qk_nope = 4;
  c.qk_rope = 4;
  c.v_head = 4;
  c.kda_heads = 2;
  c.kda_dim = 4;
  c.conv_k = 4;
  c.attn_res_block = 2;
  c.attention = {waste::LayerAttention::kda, waste::LayerAttention::kda, waste::LayerAttention::mla,
                 waste::LayerAttention::kda};
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const waste::ModelConfig config = tiny_config();
  auto created = waste::model::RunState::create(config, 8);
  if (!created) __builtin_trap();
  waste::model::RunState state = std::move(*created);
  state.set_position(3);
  const std::vector<std::byte> before = waste::session::encode(config, state);
  const std::vector<std::byte> input(reinterpret_cast<const std::byte*>(data),
                                     reinterpret_cast<const std::byte*>(data) + size);
  auto s = waste::session::decode_into(input, config, state, "fuzz");
  if (!s) {
    if (waste::session::encode(config, state) != before) __builtin_trap();  // refused: untouched
    return 0;
  }
  // Accepted: the state re-encodes to the input, except the two reserved header words, which
  // the reader ignores and the writer zeroes.
  std::vector<std::byte> expected = input;
  std::memset(expected.data() + 56, 0, 8);
  if (waste::session::encode(config, state) != expected) __builtin_trap();
  return 0;
}
