#include "compute/engram/ngram_hash.hpp"

#include <algorithm>
#include <string>

namespace waste::engram {

NgramHistory::NgramHistory(int max_ngram_size)
    : recent_(static_cast<std::size_t>(std::max(max_ngram_size - 1, 0)), kDead) {}

void NgramHistory::reset() { std::fill(recent_.begin(), recent_.end(), kDead); }

void NgramHistory::push(std::int32_t compressed_or_dead) {
  if (recent_.empty()) return;
  std::move_backward(recent_.begin(), recent_.end() - 1, recent_.end());
  recent_[0] = compressed_or_dead < 0 ? kDead : compressed_or_dead;
}

Status NgramHistory::restore(std::span<const std::int32_t> newest_first) {
  if (newest_first.size() != recent_.size()) {
    return make_error(Errc::format, "engram history: " + std::to_string(newest_first.size()) + " entries, expected " +
                                        std::to_string(recent_.size()));
  }
  for (const std::int32_t id : newest_first) {
    if (id < kDead) return make_error(Errc::format, "engram history: entry " + std::to_string(id) + " is below -1");
  }
  std::copy(newest_first.begin(), newest_first.end(), recent_.begin());
  return {};
}

void token_row_ids(const EngramLayout& layout, std::size_t layer_index, std::int32_t current,
                   std::span<const std::int32_t> before, std::span<std::uint64_t> rows) noexcept {
  const EngramLayer& layer = layout.layers[layer_index];
  const auto pad = static_cast<std::uint64_t>(layout.pad_id);
  const auto heads = static_cast<std::size_t>(layout.n_heads);
  bool blocked = false;
  std::uint64_t rolling = 0;
  for (std::size_t shift = 0; shift < static_cast<std::size_t>(layout.max_ngram_size); ++shift) {
    const std::int32_t source = shift == 0 ? current : (shift - 1 < before.size() ? before[shift - 1] : kDead);
    blocked = blocked || source < 0;
    const std::uint64_t id = blocked ? pad : static_cast<std::uint64_t>(source);
    // id < compressed_vocab_size and the multiplier's bound keep the product inside int64.
    const std::uint64_t product = id * static_cast<std::uint64_t>(layer.multipliers[shift]);
    if (shift == 0) {
      rolling = product;
      continue;
    }
    rolling ^= product;
    const std::size_t first = (shift - 1) * heads;
    for (std::size_t h = 0; h < heads; ++h) rows[first + h] = rolling % layer.primes[first + h] + layer.offsets[first + h];
  }
}

Result<std::vector<std::uint64_t>> sequence_row_ids(const EngramTables& tables, std::span<const std::int32_t> tokens,
                                                    std::span<const std::uint8_t> dead, NgramHistory& history) {
  const EngramLayout& layout = tables.layout;
  if (!dead.empty() && dead.size() != tokens.size()) {
    return make_error(Errc::argument, "engram: " + std::to_string(dead.size()) + " image flags for " +
                                          std::to_string(tokens.size()) + " tokens");
  }
  if (history.recent().size() != static_cast<std::size_t>(layout.max_ngram_size - 1)) {
    return make_error(Errc::argument, "engram: the history holds " + std::to_string(history.recent().size()) +
                                          " tokens, the layout looks back " +
                                          std::to_string(layout.max_ngram_size - 1));
  }
  const auto columns = static_cast<std::size_t>(layout.columns());
  const std::size_t n_layers = layout.layers.size();
  std::vector<std::uint64_t> out(tokens.size() * n_layers * columns);
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::int32_t raw = tokens[t];
    if (raw < 0 || static_cast<std::size_t>(raw) >= tables.token_map.size()) {
      return make_error(Errc::argument, "engram: token " + std::to_string(t) + " has id " + std::to_string(raw) +
                                            ", outside the compressed token map's " +
                                            std::to_string(tables.token_map.size()) + " ids");
    }
    const std::int32_t current = !dead.empty() && dead[t] ? kDead : tables.token_map[static_cast<std::size_t>(raw)];
    for (std::size_t l = 0; l < n_layers; ++l) {
      token_row_ids(layout, l, current, history.recent(),
                    std::span<std::uint64_t>(out).subspan((t * n_layers + l) * columns, columns));
    }
    history.push(current);
  }
  return out;
}

}  // namespace waste::engram
