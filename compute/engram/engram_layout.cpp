#include "compute/engram/engram_layout.hpp"

#include <limits>
#include <set>
#include <string>

#include "compute/engram/numpy_random.hpp"
#include "compute/engram/primes.hpp"

namespace waste::engram {

std::vector<std::int64_t> hash_multipliers(int layer_id, int max_ngram_size, std::int64_t compressed_vocab_size) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::int64_t bound = std::max<std::int64_t>(1, (kMax / compressed_vocab_size) / 2);
  const auto seed = static_cast<std::uint64_t>(10007) * static_cast<std::uint64_t>(layer_id);
  auto values = numpy_integers_int64(seed, 0, bound, static_cast<std::size_t>(max_ngram_size));
  for (auto& v : values) v = v * 2 + 1;
  return values;
}

Result<EngramLayout> derive_engram_layout(const EngramParams& p) {
  auto bad = [](const std::string& what) { return make_error(Errc::argument, "engram layout: " + what); };
  if (p.layer_ids.empty()) return bad("engram_layer_ids is empty");
  std::set<int> seen;
  for (const int id : p.layer_ids) {
    if (id < 0) return bad("engram_layer_ids has " + std::to_string(id) + ", below 0");
    if (!seen.insert(id).second) return bad("engram_layer_ids repeats " + std::to_string(id));
  }
  if (p.max_ngram_size < 2 || p.max_ngram_size > 16) {
    return bad("engram_max_ngram_size " + std::to_string(p.max_ngram_size) + " is outside 2..16");
  }
  if (p.n_heads < 1 || p.n_heads > 1024) return bad("engram_n_heads " + std::to_string(p.n_heads) + " is outside 1..1024");
  if (p.head_dim < 1) return bad("engram_head_dim " + std::to_string(p.head_dim) + " is below 1");
  if (p.compressed_vocab_size < 1) {
    return bad("engram_compressed_vocab_size " + std::to_string(p.compressed_vocab_size) + " is below 1");
  }
  if (p.pad_id < 0 || p.pad_id >= p.compressed_vocab_size) {
    return bad("pad id " + std::to_string(p.pad_id) + " is outside the compressed vocabulary 0.." +
               std::to_string(p.compressed_vocab_size - 1));
  }
  if (!p.num_embeddings.empty() && p.num_embeddings.size() != p.layer_ids.size()) {
    return bad("engram_num_embeddings has " + std::to_string(p.num_embeddings.size()) + " entries for " +
               std::to_string(p.layer_ids.size()) + " layers");
  }
  auto primes = draw_bucket_primes(static_cast<int>(p.layer_ids.size()), p.max_ngram_size, p.n_heads,
                                   p.engram_vocab_size);
  if (!primes) return std::unexpected(primes.error());

  EngramLayout out;
  out.compressed_vocab_size = p.compressed_vocab_size;
  out.pad_id = p.pad_id;
  out.max_ngram_size = p.max_ngram_size;
  out.n_heads = p.n_heads;
  out.head_dim = p.head_dim;
  for (std::size_t i = 0; i < p.layer_ids.size(); ++i) {
    EngramLayer layer;
    layer.layer = p.layer_ids[i];
    layer.multipliers = hash_multipliers(layer.layer, p.max_ngram_size, p.compressed_vocab_size);
    std::uint64_t run = 0;
    for (const auto& per_ngram : (*primes)[i]) {
      for (const std::uint64_t prime : per_ngram) {
        layer.offsets.push_back(run);
        layer.primes.push_back(prime);
        run += prime;
      }
    }
    if (!p.num_embeddings.empty() && p.num_embeddings[i] != layer.rows()) {
      return bad("engram layer " + std::to_string(layer.layer) + ": the bucket primes sum to " +
                 std::to_string(layer.rows()) + " rows and engram_num_embeddings states " +
                 std::to_string(p.num_embeddings[i]));
    }
    out.layers.push_back(std::move(layer));
  }
  return out;
}

}  // namespace waste::engram
