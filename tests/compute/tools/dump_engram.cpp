// Engram addressing (compute/engram) on given parameters, for the numpy/sympy oracle
// (tests/reference/engram_oracle.py):
//   waste-dump-engram CASE.json OUT_DIR
// CASE.json: {"prime_cases": [[n_layers, max_ngram_size, n_heads, engram_vocab_size], ...],
//             "multiplier_cases": [[layer_id, max_ngram_size, compressed_vocab_size], ...],
//             "layout": {"layer_ids", "max_ngram_size", "n_heads", "head_dim", "engram_vocab_size",
//                        "compressed_vocab_size", "pad_token_id" (a raw id), "token_map": [int]},
//             "sequences": [{"tokens": [int], "dead": [0|1], "chunk": int}, ...],
//             "token_texts": [{"hex": "bytes of the decoded token", "spelling": "vocabulary key"}, ...]}
// Derives the layout in C++, writes engram.json + engram-tokmap.bin to OUT_DIR and reads them back
// through the parser, then hashes each sequence from a fresh history in calls of `chunk` tokens
// (the history carried between calls, and once saved and restored into a new history halfway).
// Prints {"primes": [...], "multipliers": [...], "layers": [...as engram.json], "rows": [[...]],
// "token_map": [...], "token_map_size": int} (the last two derived from token_texts).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/engram/engram_json.hpp"
#include "compute/engram/engram_layout.hpp"
#include "compute/engram/ngram_hash.hpp"
#include "compute/engram/primes.hpp"
#include "compute/engram/token_map.hpp"

using namespace waste;
using nlohmann::json;

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "waste-dump-engram: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: waste-dump-engram CASE.json OUT_DIR");
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const json c = json::parse(buffer.str(), nullptr, false);
  if (c.is_discarded()) return fail("CASE.json is not JSON");
  const std::filesystem::path out_dir = argv[2];
  std::filesystem::create_directories(out_dir);
  json result;

  json primes = json::array();
  for (const auto& pc : c.at("prime_cases")) {
    auto p = engram::draw_bucket_primes(pc[0].get<int>(), pc[1].get<int>(), pc[2].get<int>(), pc[3].get<std::uint64_t>());
    if (!p) return fail(p.error().message);
    primes.push_back(*p);
  }
  result["primes"] = primes;

  json mults = json::array();
  for (const auto& mc : c.at("multiplier_cases")) {
    mults.push_back(engram::hash_multipliers(mc[0].get<int>(), mc[1].get<int>(), mc[2].get<std::int64_t>()));
  }
  result["multipliers"] = mults;

  const json& l = c.at("layout");
  const auto token_map = l.at("token_map").get<std::vector<std::int32_t>>();
  engram::EngramParams params;
  params.layer_ids = l.at("layer_ids").get<std::vector<int>>();
  params.max_ngram_size = l.at("max_ngram_size").get<int>();
  params.n_heads = l.at("n_heads").get<int>();
  params.head_dim = l.at("head_dim").get<int>();
  params.engram_vocab_size = l.at("engram_vocab_size").get<std::uint64_t>();
  params.compressed_vocab_size = l.at("compressed_vocab_size").get<std::int64_t>();
  params.pad_id = token_map.at(l.at("pad_token_id").get<std::size_t>());
  auto layout = engram::derive_engram_layout(params);
  if (!layout) return fail(layout.error().message);
  {
    std::ofstream(out_dir / engram::kEngramJsonFile, std::ios::binary) << engram::engram_json_text(*layout);
    std::ofstream(out_dir / engram::kTokenMapFile, std::ios::binary) << engram::token_map_bytes(token_map);
  }
  auto tables = engram::load_engram_tables(out_dir);
  if (!tables) return fail(tables.error().message);
  result["layers"] = json::parse(engram::engram_json_text(tables->layout))["layers"];
  result["pad_id"] = tables->layout.pad_id;

  json rows = json::array();
  for (const auto& seq : c.at("sequences")) {
    const auto tokens = seq.at("tokens").get<std::vector<std::int32_t>>();
    const auto dead = seq.at("dead").get<std::vector<std::uint8_t>>();
    const auto chunk = std::max<std::size_t>(1, seq.at("chunk").get<std::size_t>());
    engram::NgramHistory history(tables->layout.max_ngram_size);
    std::vector<std::uint64_t> all;
    for (std::size_t start = 0; start < tokens.size(); start += chunk) {
      const std::size_t n = std::min(chunk, tokens.size() - start);
      if (start >= tokens.size() / 2 && start < tokens.size() / 2 + chunk) {
        // Session state: the look-back saved and restored into a new history.
        const std::vector<std::int32_t> saved(history.recent().begin(), history.recent().end());
        engram::NgramHistory restored(tables->layout.max_ngram_size);
        if (auto ok = restored.restore(saved); !ok) return fail(ok.error().message);
        history = restored;
      }
      auto r = engram::sequence_row_ids(*tables, std::span(tokens).subspan(start, n),
                                        std::span(dead).subspan(start, n), history);
      if (!r) return fail(r.error().message);
      all.insert(all.end(), r->begin(), r->end());
    }
    rows.push_back(all);
  }
  result["rows"] = rows;

  std::vector<engram::TokenText> texts;
  for (const auto& t : c.value("token_texts", json::array())) {
    const auto hex = t.at("hex").get<std::string>();
    std::string bytes;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    texts.push_back({bytes, t.at("spelling").get<std::string>()});
  }
  if (!texts.empty()) {
    auto map = engram::derive_compressed_token_map(texts);
    if (!map) return fail(map.error().message);
    result["token_map"] = map->map;
    result["token_map_size"] = map->size;
  }
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
