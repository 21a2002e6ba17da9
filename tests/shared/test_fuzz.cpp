// Seeded mutation fuzzing of the untrusted inputs: manifest JSON text and record headers.
// Every input must either parse/validate or return an error; run under ASan/UBSan in CI.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "shared/container/container.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/synth/synth.hpp"

using namespace waste;
using nlohmann::json;

namespace {

constexpr int kIterations = 3000;

synth::SynthSpec tiny_spec() {
  synth::SynthRequest req;
  req.preset = "tiny";
  auto spec = synth::make_spec(req);
  REQUIRE(spec.has_value());
  return *spec;
}

// A manifest as the writer would produce it, without touching the disk.
std::string tiny_manifest_text(const synth::SynthSpec& spec) {
  Manifest m = spec.skeleton;
  std::uint64_t off = 0;
  for (const auto& p : synth::plan_trunk(spec)) {
    TrunkTensorInfo t;
    t.name = p.name;
    t.fmt = p.fmt;
    t.shape = p.shape;
    t.offset = off;
    off += t.payload_bytes();
    t.scale_offset = off;
    off += t.scale_bytes();
    t.bytes = t.payload_bytes() + t.scale_bytes();
    m.trunk.push_back(t);
  }
  for (int l = 1; l < 4; ++l) m.banks[l] = ExpertBankInfo{l, "experts-L" + std::to_string(l) + ".bin", 8, 8 * 12288, 9 * (l - 1)};
  return m.to_json_text();
}

json random_value(std::mt19937_64& rng) {
  switch (rng() % 14) {
    case 0: return -1;
    case 1: return 0;
    case 2: return 1;
    case 3: return std::int64_t{1} << 31;
    case 4: return std::numeric_limits<std::int64_t>::max();
    case 5: return std::numeric_limits<std::uint64_t>::max();
    case 6: return 1e308;
    case 7: return "VQ4P";
    case 8: return nullptr;
    case 9: return json::array();
    case 10: return json::object();
    case 11: return true;
    case 12: return std::int64_t(rng() % 70000) - 10;
    default: return json::array({rng() % 300, rng() % 300});
  }
}

// Replace or delete a random node of the document.
void mutate_tree(json& root, std::mt19937_64& rng) {
  json* node = &root;
  for (int depth = 0; depth < 6 && (node->is_object() || node->is_array()) && !node->empty(); ++depth) {
    auto it = node->begin();
    std::advance(it, std::ptrdiff_t(rng() % node->size()));
    if (rng() % 3 == 0 || !(it->is_object() || it->is_array())) {
      if (rng() % 4 == 0 && node->is_object()) {
        node->erase(it.key());
      } else {
        *it = random_value(rng);
      }
      return;
    }
    node = &*it;
  }
}

void mutate_text(std::string& text, std::mt19937_64& rng) {
  if (text.empty()) return;
  const std::size_t pos = rng() % text.size();
  switch (rng() % 4) {
    case 0: text[pos] = char(rng() & 0xff); break;
    case 1: text.erase(pos, std::min<std::size_t>(rng() % 16 + 1, text.size() - pos)); break;
    case 2: text.insert(pos, 1, "0123456789-.,:{}[]\"e"[rng() % 20]); break;
    default: text[pos] = char('0' + rng() % 10); break;
  }
}

// Whatever parsed must survive everything that derives sizes from it.
void exercise(const Manifest& m) {
  (void)validate_text_tensors(m);
  for (const auto& t : m.trunk) {
    (void)check_trunk_bounds(t, 1 << 20);
    (void)t.payload_bytes();
    (void)t.scale_bytes();
  }
  if (m.config.n_experts > 0) (void)ExpertGeometry::from(m.config, m.quant);
  (void)m.max_record_bytes();
  (void)m.to_json_text();
}

}  // namespace

TEST_CASE("fuzzed manifests parse or fail cleanly", "[shared][container]") {
  const auto spec = tiny_spec();
  const std::string base = tiny_manifest_text(spec);
  REQUIRE(Manifest::parse(base).has_value());
  std::mt19937_64 rng(20240601);
  int accepted = 0, refused = 0;
  for (int i = 0; i < kIterations; ++i) {
    std::string text;
    if (i % 2 == 0) {
      json j = json::parse(base);
      for (int k = 0, n = 1 + int(rng() % 3); k < n; ++k) mutate_tree(j, rng);
      text = j.dump();
    } else {
      text = base;
      for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) mutate_text(text, rng);
    }
    auto m = Manifest::parse(text);
    if (m) {
      ++accepted;
      exercise(*m);
    } else {
      ++refused;
      REQUIRE_FALSE(m.error().message.empty());
    }
  }
  // Both outcomes must actually occur, or the harness is not exploring anything.
  REQUIRE(accepted > 0);
  REQUIRE(refused > 0);
}

TEST_CASE("fuzzed record headers validate or fail cleanly", "[shared][container]") {
  const auto spec = tiny_spec();
  auto geometry = ExpertGeometry::from(spec.skeleton.config, spec.skeleton.quant);
  REQUIRE(geometry.has_value());
  std::vector<std::byte> good(geometry->record_bytes);
  synth::encode_expert_record(spec, *geometry, 2, 5, good);
  REQUIRE(validate_record_header(good, 2, 5, spec.skeleton.quant, *geometry, 27).has_value());
  REQUIRE(verify_record_crc(good, 2, 5, *geometry).has_value());
  std::mt19937_64 rng(77);
  int accepted = 0, refused = 0;
  for (int i = 0; i < kIterations; ++i) {
    std::vector<std::byte> rec = good;
    for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) {
      const std::size_t pos = rng() % 48;
      if (rng() % 2) {
        rec[pos] = std::byte(rng() & 0xff);
      } else {
        // Plausible-looking offsets are the dangerous ones: small values near real fields.
        const std::uint32_t v = std::uint32_t(rng() % 13000);
        std::memcpy(rec.data() + (pos & ~std::size_t(3)), &v, 4);
      }
    }
    std::size_t size = rec.size();
    if (rng() % 8 == 0) size = rng() % rec.size();
    // Exact-size heap copy so ASan sees any read past the record.
    std::vector<std::byte> exact(rec.begin(), rec.begin() + std::ptrdiff_t(size));
    auto s = validate_record_header(exact, 2, 5, spec.skeleton.quant, *geometry, 27);
    if (s) {
      ++accepted;
      (void)verify_record_crc(exact, 2, 5, *geometry);
      const ExpertView v = make_expert_view(exact, *geometry);
      const auto* end = reinterpret_cast<const std::uint8_t*>(exact.data() + exact.size());
      for (int kind = 0; kind < 3; ++kind) {
        REQUIRE(v.index[kind] + geometry->index_bytes[kind] <= end);
        REQUIRE(reinterpret_cast<const std::uint8_t*>(v.scales[kind]) + 2 * geometry->rows[kind] <= end);
      }
    } else {
      ++refused;
      REQUIRE(s.error().message.starts_with("expert 5 of layer 2: "));
    }
  }
  REQUIRE(accepted > 0);
  REQUIRE(refused > 0);
}
