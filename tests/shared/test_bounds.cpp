// Hostile containers must be refused or stay in bounds: expert counts whose ids do not fit the
// 16-bit cache key / ring encoding, and codebooks smaller than what an index byte can address.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <iterator>

#include "shared/container/codebooks.hpp"
#include "shared/container/container.hpp"
#include "shared/fp16.hpp"
#include "shared/synth/synth.hpp"
#include "temp_dir.hpp"

using namespace waste;
using nlohmann::json;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A synthesised container whose expert quantisation is overridden before writing.
std::filesystem::path write_tiny(const test::TempDir& dir, int entries) {
  synth::SynthRequest req;
  req.preset = "tiny";
  auto spec = synth::make_spec(req);
  REQUIRE(spec.has_value());
  spec->skeleton.quant.entries = entries;
  REQUIRE(synth::write_container(*spec, dir.path()).has_value());
  return dir.path();
}

}  // namespace

TEST_CASE("hazard: more than 65536 experts would truncate 16-bit expert ids, refused with the limit",
          "[shared][container]") {
  test::TempDir dir("bounds-experts");
  const auto path = write_tiny(dir, 256);
  json m = json::parse(slurp(path / "manifest.json"));
  m["config"]["num_experts"] = 70000;
  for (auto& [key, bank] : m["layers"].items()) {
    bank["experts"] = 70000;
    bank["bytes"] = std::uint64_t{70000} * 12288;
  }
  auto parsed = Manifest::parse(m.dump());
  REQUIRE_FALSE(parsed);
  CHECK(parsed.error().code == Errc::format);
  CHECK(parsed.error().message ==
        "config.num_experts 70000 exceeds the limit 65536 (expert ids are 16-bit in the cache key)");
  {
    std::ofstream out(path / "manifest.json", std::ios::trunc);
    out << m.dump(1);
  }
  auto info = ContainerInfo::open(path);
  REQUIRE_FALSE(info);
  CHECK(info.error().message == (path / "manifest.json").string() +
                                    ": config.num_experts 70000 exceeds the limit 65536 (expert ids are 16-bit in "
                                    "the cache key)");

  // Exactly the limit is accepted by the config reader (ids 0..65535 fit).
  json c = m["config"];
  c["num_experts"] = 65536;
  auto cfg = ModelConfig::from_json(c);
  INFO((cfg ? std::string() : cfg.error().message));
  CHECK(cfg.has_value());
  // A bank claiming more experts than that is refused by the bank reader's own bound.
  json bad = json::parse(slurp(path / "manifest.json"));
  bad["config"]["num_experts"] = 8;
  bad["layers"]["1"]["experts"] = 65537;
  auto bank = Manifest::parse(bad.dump());
  REQUIRE_FALSE(bank);
  CHECK(bank.error().message == "layers.1.experts: 65537 is out of range 1..65536");
}

TEST_CASE("hazard: index bytes >= entries read past a 200-entry book, books are padded to 256 with zeros",
          "[shared][container]") {
  test::TempDir dir("bounds-books");
  const auto path = write_tiny(dir, 200);
  auto info = ContainerInfo::open(path);
  REQUIRE(info);
  REQUIRE(info->manifest.quant.entries == 200);
  REQUIRE(info->geometry.lut_entries == 256);
  auto books = Codebooks::load(info->files.codebooks(), info->manifest.quant);
  REQUIRE(books);
  CHECK(books->entries() == 200);
  CHECK(books->table_entries() == 256);
  // Bytes of the file: book b's centroid e at 16 + b*(16 + 200*8*2) + e*16.
  const std::string raw = slurp(info->files.codebooks());
  for (int b : {0, books->n_books() - 1}) {
    auto book = books->book(b);
    REQUIRE(book.size() == 256 * 8);
    for (int i = 0; i < 200 * 8; ++i) {
      std::uint16_t h;
      std::memcpy(&h, raw.data() + std::size_t(b) * (16 + 200 * 16) + 16 + 2 * std::size_t(i), 2);
      const float want = fp16_to_f32_flush(h);
      REQUIRE(std::memcmp(&want, &book[std::size_t(i)], 4) == 0);
    }
    for (int i = 200 * 8; i < 256 * 8; ++i) {
      const float zero = 0.0f;
      REQUIRE(std::memcmp(&zero, &book[std::size_t(i)], 4) == 0);
    }
  }
}

TEST_CASE("hazard: a hand-built quantisation with entries above 2^index_bits is refused by the codebook reader",
          "[shared][container]") {
  test::TempDir dir("bounds-quant");
  const auto path = write_tiny(dir, 256);
  ExpertQuant q;
  q.entries = 300;
  auto books = Codebooks::load(path / "codebooks.bin", q);
  REQUIRE_FALSE(books);
  CHECK(books.error().message ==
        (path / "codebooks.bin").string() + ": expert_quant.entries 300 is out of range 1..256 (8-bit indices)");
  q.entries = 64;
  q.index_bits = 7;
  books = Codebooks::load(path / "codebooks.bin", q);
  REQUIRE_FALSE(books);
  CHECK(books.error().message == (path / "codebooks.bin").string() + ": expert_quant.index_bits 7 is not 8 or 6");
  // The manifest already bounds entries to 1..256.
  json m = json::parse(slurp(path / "manifest.json"));
  m["expert_quant"]["entries"] = 257;
  auto parsed = Manifest::parse(m.dump());
  REQUIRE_FALSE(parsed);
  CHECK(parsed.error().message == "expert_quant.entries: 257 is out of range 1..256");
}
