#include "compute/engram/engram_json.hpp"

#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "compute/engram/primes.hpp"
#include "shared/container/file_io.hpp"
#include "shared/json_depth.hpp"

namespace waste::engram {
namespace {

using json = nlohmann::json;

class Reader {
 public:
  explicit Reader(std::string_view origin) : origin_(origin) {}

  std::unexpected<Error> fail(const std::string& key, const std::string& what) const {
    return make_error(Errc::format, origin_ + ": " + key + ": " + what);
  }

  // An integer in [lo, hi]; `key` is the path shown in errors.
  Result<std::int64_t> integer(const json& value, const std::string& key, std::int64_t lo, std::int64_t hi) const {
    if (value.is_number_unsigned()) {
      if (value.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
        return fail(key, value.dump() + " is above " + std::to_string(hi));
      }
      const auto u = static_cast<std::int64_t>(value.get<std::uint64_t>());
      if (u < lo) return fail(key, std::to_string(u) + " is below " + std::to_string(lo));
      return u;
    }
    if (!value.is_number_integer()) return fail(key, "expected an integer, found " + value.dump());
    const auto v = value.get<std::int64_t>();
    if (v < lo) return fail(key, std::to_string(v) + " is below " + std::to_string(lo));
    if (v > hi) return fail(key, std::to_string(v) + " is above " + std::to_string(hi));
    return v;
  }

  Result<std::int64_t> member(const json& object, const std::string& prefix, const char* name, std::int64_t lo,
                              std::int64_t hi) const {
    const std::string key = prefix + name;
    auto it = object.find(name);
    if (it == object.end()) return fail(key, "missing");
    return integer(*it, key, lo, hi);
  }

  Result<const json*> array(const json& object, const std::string& prefix, const char* name, std::size_t size) const {
    const std::string key = prefix + name;
    auto it = object.find(name);
    if (it == object.end()) return fail(key, "missing");
    if (!it->is_array()) return fail(key, "expected an array");
    if (it->size() != size) {
      return fail(key, std::to_string(it->size()) + " entries, expected " + std::to_string(size));
    }
    return &*it;
  }

 private:
  std::string origin_;
};

}  // namespace

Result<EngramLayout> parse_engram_json(std::string_view text, std::string_view origin_view) {
  const Reader r(origin_view);
  const std::string origin(origin_view);
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return make_error(Errc::format, origin + ": not a JSON object");
  if (nested_deeper_than(doc, 6)) return make_error(Errc::format, origin + ": nested deeper than 6 levels");
  constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

  EngramLayout out;
  WASTE_ASSIGN(out.compressed_vocab_size, r.member(doc, "", "compressed_vocab_size", 1, kInt32Max));
  WASTE_ASSIGN(out.pad_id, r.member(doc, "", "pad_id", 0, out.compressed_vocab_size - 1));
  std::int64_t v = 0;
  WASTE_ASSIGN(v, r.member(doc, "", "max_ngram_size", 2, 16));
  out.max_ngram_size = static_cast<int>(v);
  WASTE_ASSIGN(v, r.member(doc, "", "n_heads", 1, 1024));
  out.n_heads = static_cast<int>(v);
  WASTE_ASSIGN(v, r.member(doc, "", "head_dim", 1, 1 << 20));
  out.head_dim = static_cast<int>(v);
  auto layers_it = doc.find("layers");
  if (layers_it == doc.end()) return r.fail("layers", "missing");
  if (!layers_it->is_array() || layers_it->empty()) {
    return r.fail("layers", "expected a non-empty array");
  }
  // id * multiplier must fit int64 for every compressed id (the reference's bound).
  const std::int64_t max_multiplier = kInt64Max / std::max<std::int64_t>(out.compressed_vocab_size - 1, 1);
  std::set<std::int64_t> layer_ids;
  std::set<std::uint64_t> all_primes;
  for (std::size_t i = 0; i < layers_it->size(); ++i) {
    const json& entry = (*layers_it)[i];
    const std::string at = "layers[" + std::to_string(i) + "]";
    if (!entry.is_object()) return r.fail(at, "expected an object");
    EngramLayer layer;
    WASTE_ASSIGN(v, r.member(entry, at + ".", "layer", 0, 1 << 20));
    layer.layer = static_cast<int>(v);
    if (!layer_ids.insert(v).second) {
      return r.fail(at + ".layer", "layer " + std::to_string(v) + " appears twice");
    }
    const json* mults = nullptr;
    WASTE_ASSIGN(mults, r.array(entry, at + ".", "multipliers", static_cast<std::size_t>(out.max_ngram_size)));
    for (std::size_t s = 0; s < mults->size(); ++s) {
      const std::string key = at + ".multipliers[" + std::to_string(s) + "]";
      std::int64_t m = 0;
      WASTE_ASSIGN(m, r.integer((*mults)[s], key, 1, max_multiplier));
      if (m % 2 == 0) return r.fail(key, std::to_string(m) + " is even");
      layer.multipliers.push_back(m);
    }
    const json* primes = nullptr;
    WASTE_ASSIGN(primes, r.array(entry, at + ".", "primes", static_cast<std::size_t>(out.max_ngram_size - 1)));
    for (std::size_t n = 0; n < primes->size(); ++n) {
      const std::string key = at + ".primes[" + std::to_string(n) + "]";
      const json& per_ngram = (*primes)[n];
      if (!per_ngram.is_array() || per_ngram.size() != static_cast<std::size_t>(out.n_heads)) {
        return r.fail(key, "expected an array of n_heads (" + std::to_string(out.n_heads) + ") primes");
      }
      for (std::size_t h = 0; h < per_ngram.size(); ++h) {
        const std::string pkey = key + "[" + std::to_string(h) + "]";
        std::int64_t p = 0;
        WASTE_ASSIGN(p, r.integer(per_ngram[h], pkey, 2, std::int64_t{1} << 62));
        if (!is_prime(static_cast<std::uint64_t>(p))) {
          return r.fail(pkey, std::to_string(p) + " is not a prime");
        }
        if (!all_primes.insert(static_cast<std::uint64_t>(p)).second) {
          return r.fail(pkey, std::to_string(p) + " is used twice (bucket ranges must be disjoint)");
        }
        layer.primes.push_back(static_cast<std::uint64_t>(p));
      }
    }
    const json* offsets = nullptr;
    WASTE_ASSIGN(offsets, r.array(entry, at + ".", "offsets", layer.primes.size()));
    std::uint64_t run = 0;
    for (std::size_t c = 0; c < offsets->size(); ++c) {
      const std::string key = at + ".offsets[" + std::to_string(c) + "]";
      std::int64_t o = 0;
      WASTE_ASSIGN(o, r.integer((*offsets)[c], key, 0, kInt64Max));
      if (static_cast<std::uint64_t>(o) != run) {
        return r.fail(key, std::to_string(o) + " is not the sum of the primes before it (" + std::to_string(run) + ")");
      }
      layer.offsets.push_back(run);
      run += layer.primes[c];
    }
    out.layers.push_back(std::move(layer));
  }
  return out;
}

std::string engram_json_text(const EngramLayout& layout) {
  json layers = json::array();
  const auto heads = static_cast<std::size_t>(layout.n_heads);
  for (const EngramLayer& layer : layout.layers) {
    json primes = json::array();
    for (std::size_t n = 0; n + 1 < static_cast<std::size_t>(layout.max_ngram_size); ++n) {
      json row = json::array();
      for (std::size_t h = 0; h < heads; ++h) row.push_back(layer.primes[n * heads + h]);
      primes.push_back(std::move(row));
    }
    layers.push_back({{"layer", layer.layer},
                      {"multipliers", layer.multipliers},
                      {"primes", std::move(primes)},
                      {"offsets", layer.offsets}});
  }
  const json doc = {{"compressed_vocab_size", layout.compressed_vocab_size},
                    {"pad_id", layout.pad_id},
                    {"max_ngram_size", layout.max_ngram_size},
                    {"n_heads", layout.n_heads},
                    {"head_dim", layout.head_dim},
                    {"layers", std::move(layers)}};
  return doc.dump(1) + "\n";
}

Result<std::vector<std::int32_t>> parse_token_map(std::string_view bytes, std::int64_t compressed_vocab_size,
                                                  std::string_view origin_view) {
  const std::string origin(origin_view);
  if (bytes.empty() || bytes.size() % 4 != 0) {
    return make_error(Errc::format, origin + ": " + std::to_string(bytes.size()) +
                                        " bytes, not a non-empty whole number of int32 ids");
  }
  std::vector<std::int32_t> map(bytes.size() / 4);
  for (std::size_t i = 0; i < map.size(); ++i) {
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data() + 4 * i);
    const std::uint32_t u = std::uint32_t(b[0]) | std::uint32_t(b[1]) << 8 | std::uint32_t(b[2]) << 16 |
                            std::uint32_t(b[3]) << 24;
    const auto id = static_cast<std::int32_t>(u);
    if (id < 0 || id >= compressed_vocab_size) {
      return make_error(Errc::format, origin + ": token " + std::to_string(i) + " maps to " + std::to_string(id) +
                                          ", outside the compressed vocabulary 0.." +
                                          std::to_string(compressed_vocab_size - 1));
    }
    map[i] = id;
  }
  return map;
}

std::string token_map_bytes(std::span<const std::int32_t> token_map) {
  std::string out(token_map.size() * 4, '\0');
  for (std::size_t i = 0; i < token_map.size(); ++i) {
    const auto u = static_cast<std::uint32_t>(token_map[i]);
    for (int k = 0; k < 4; ++k) out[4 * i + std::size_t(k)] = static_cast<char>((u >> (8 * k)) & 0xFFu);
  }
  return out;
}

Result<EngramTables> load_engram_tables(const std::filesystem::path& container_dir) {
  const auto json_path = container_dir / kEngramJsonFile;
  auto text = read_text_file(json_path, 16ull << 20);
  if (!text) return std::unexpected(text.error());
  EngramTables tables;
  WASTE_ASSIGN(tables.layout, parse_engram_json(*text, json_path.string()));
  const auto map_path = container_dir / kTokenMapFile;
  auto bytes = read_text_file(map_path, 64ull << 20);
  if (!bytes) return std::unexpected(bytes.error());
  WASTE_ASSIGN(tables.token_map, parse_token_map(*bytes, tables.layout.compressed_vocab_size, map_path.string()));
  return tables;
}

}  // namespace waste::engram
