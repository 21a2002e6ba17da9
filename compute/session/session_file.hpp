// Session files (waste-v0-reference.md §6.1): the whole sequence state of an engine, in the
// reference engine's byte layout, so a session saved by either engine loads in the other.
//   header: 16 x u32 LE (magic "WDAS", version 1, the model's shape fields, pos, n_blockres);
//   body, per layer in order: KDA -> S [H][K][V] f32 then the q, k, v conv rings [C][K-1];
//         MLA -> i32 n_kv then n_kv x (kv_lora + qk_rope) f32 latents; with GLM's DSA indexer
//                (index_n_heads > 0) then its state at n_kv tokens: n_kv / index_kpool pooled keys,
//                and the k rows then the gate rows of the n_kv % index_kpool tokens of the
//                unfilled pool, index_head_dim f32 each (a restored session continues exactly);
//   then n_blockres x hidden f32 block history (AttnRes models), then hidden f32 of x
//   (mHC models, GLM: hc_mult x hidden, the streams after the last layer; the header's word
//   after n_blockres holds hc_mult, 0 for every other model as in the v0 layout).
// Loading validates the whole file against the model before any live state changes, so a
// refused session leaves the running sequence exactly as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "compute/model/run_state.hpp"
#include "shared/container/model_config.hpp"
#include "shared/result.hpp"

namespace waste {
class Engine;
}

namespace waste::session {

inline constexpr std::uint32_t kMagic = 0x53414457;  // "WDAS" little-endian
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::size_t kHeaderBytes = 64;

// Header fields, in file order.
struct SessionHeader {
  std::uint32_t magic = kMagic;
  std::uint32_t version = kVersion;
  std::uint32_t n_layers = 0, hidden = 0, kda_heads = 0, kda_dim = 0, conv_k = 0;
  std::uint32_t n_heads = 0, qk_nope = 0, qk_rope = 0, v_head = 0, attn_res_block = 0;
  std::uint32_t pos = 0;
  std::uint32_t n_blockres = 0;
  std::uint32_t hc_mult = 0;       // mHC streams (GLM); 0 = none (v0's first reserved word)
  std::uint32_t reserved = 0;
};

// The header a state of `config` at `state`'s position has.
SessionHeader make_header(const ModelConfig& config, const model::RunState& state);

// Exact byte size of a session for `config` with these header values.
std::uint64_t session_bytes(const ModelConfig& config, const SessionHeader& header);

// The largest session a state of this capacity can hold (pos = its context, every block): load
// refuses a bigger file before reading it.
std::uint64_t max_session_bytes(const ModelConfig& config, const model::RunState& state);

// Serialize the state (file bytes; header + body).
std::vector<std::byte> encode(const ModelConfig& config, const model::RunState& state);

// Check `bytes` against the model and the state's capacity, then (only if every check passed)
// overwrite `state` with it. `origin` names the file in errors:
// "session FILE: kda_heads 4 != model 8". Errc::format for every refusal.
Status decode_into(std::span<const std::byte> bytes, const ModelConfig& config, model::RunState& state,
                   const std::string& origin);
// The checks of decode_into alone.
Status validate(std::span<const std::byte> bytes, const ModelConfig& config, const model::RunState& state,
                const std::string& origin);

// Write atomically: PATH.tmp.<pid>.<seq> (mode 0600), fsync, rename over PATH, fsync the directory.
Status save(const Engine& engine, const std::filesystem::path& path);
// Read PATH and restore it into the engine; on any failure the engine's state is untouched.
// A file larger than max_session_bytes (fstat, before any read) or not a regular file is refused.
// On success the engine has no logits (the next eval/generate call feeds tokens first).
Status load(Engine& engine, const std::filesystem::path& path);

}  // namespace waste::session
