// Damaged containers: each defect gives one clear error with its exact message, no crash.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "shared/container/codebooks.hpp"
#include "shared/container/container.hpp"
#include "shared/container/expert_bank.hpp"
#include "shared/synth/synth.hpp"
#include "temp_dir.hpp"

using namespace waste;
using nlohmann::json;

namespace {

constexpr std::uint64_t kRec = 12288;  // tiny record

struct TinyContainer {
  test::TempDir dir{"damage"};
  TinyContainer() {
    synth::SynthRequest req;
    req.preset = "tiny";
    auto spec = synth::make_spec(req);
    REQUIRE(spec.has_value());
    REQUIRE(synth::write_container(*spec, dir.path()).has_value());
  }
  [[nodiscard]] std::filesystem::path bank(int layer) const {
    return dir.path() / ("experts-L" + std::to_string(layer) + ".bin");
  }
  [[nodiscard]] std::string read(const std::filesystem::path& p) const {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void write(const std::filesystem::path& p, const std::string& bytes) const {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  void patch(const std::filesystem::path& p, std::uint64_t offset, const void* bytes, std::size_t n) const {
    std::string s = read(p);
    REQUIRE(offset + n <= s.size());
    std::memcpy(s.data() + offset, bytes, n);
    write(p, s);
  }
  template <class T>
  void patch_value(int layer, int expert, std::uint64_t field, T value) const {
    patch(bank(layer), std::uint64_t(expert) * kRec + field, &value, sizeof value);
  }
  [[nodiscard]] json manifest() const { return json::parse(read(dir.path() / "manifest.json")); }
  void set_manifest(const json& j) const { write(dir.path() / "manifest.json", j.dump(1)); }

  // Read one record through the library, returning the error message ("" on success).
  [[nodiscard]] std::string read_error(int layer, int expert, bool crc = false) const {
    auto info = ContainerInfo::open(dir.path());
    if (!info) return "open: " + info.error().message;
    auto banks = ExpertBanks::open(dir.path(), info->manifest, info->n_codebooks, BankReadOptions{true, crc});
    if (!banks) return "banks: " + banks.error().message;
    AlignedBuffer buf(banks->record_bytes());
    auto s = banks->read_record(layer, expert, buf.span());
    return s ? "" : s.error().message;
  }
  [[nodiscard]] std::string open_error() const {
    auto info = ContainerInfo::open(dir.path());
    return info ? "" : info.error().message;
  }
};

std::string parse_error(const json& j) {
  auto m = Manifest::parse(j.dump());
  return m ? "" : m.error().message;
}

}  // namespace

TEST_CASE("an undamaged tiny container reads every record with crc", "[shared][container]") {
  TinyContainer c;
  for (int layer : {1, 2, 3}) {
    for (int e = 0; e < 8; ++e) REQUIRE(c.read_error(layer, e, true).empty());
  }
}

TEST_CASE("a truncated bank is refused at open and a short read is reported", "[shared][container]") {
  TinyContainer c;
  auto info = ContainerInfo::open(c.dir.path());
  REQUIRE(info.has_value());
  auto banks = ExpertBanks::open(c.dir.path(), info->manifest, info->n_codebooks, BankReadOptions{false, false});
  REQUIRE(banks.has_value());
  std::filesystem::resize_file(c.bank(2), 8 * kRec - 4096);
  AlignedBuffer buf(kRec);
  auto s = banks->read_record(2, 7, buf.span());
  REQUIRE_FALSE(s);
  REQUIRE(s.error().message == "expert 7 of layer 2: short read (got 8192 of 12288 bytes)");
  REQUIRE(c.open_error() == (c.bank(2)).string() + ": size 94208 != manifest bytes 98304");
}

TEST_CASE("a flipped payload byte is caught by the crc, not by the header checks", "[shared][container]") {
  TinyContainer c;
  const std::string before = c.read(c.bank(1));
  std::uint32_t stored;
  std::memcpy(&stored, before.data() + 3 * kRec + 36, 4);
  std::string after = before;
  after[3 * kRec + 1000] = char(after[3 * kRec + 1000] ^ 0x10);
  c.write(c.bank(1), after);
  const auto computed = std::uint32_t(::crc32(0L, reinterpret_cast<const Bytef*>(after.data() + 3 * kRec + 48), 9776 - 48));
  REQUIRE(computed != stored);
  char expect[160];
  std::snprintf(expect, sizeof expect, "expert 3 of layer 1: crc32 mismatch (stored 0x%08X, computed 0x%08X)", stored,
                computed);
  REQUIRE(c.read_error(1, 3, /*crc=*/false).empty());
  REQUIRE(c.read_error(1, 3, /*crc=*/true) == expect);
  // A flip inside the zero padding is outside the crc span, as in the reference.
  TinyContainer d;
  std::string pad = d.read(d.bank(1));
  pad[3 * kRec + 12000] = 1;
  d.write(d.bank(1), pad);
  REQUIRE(d.read_error(1, 3, true).empty());
}

TEST_CASE("record header damage gives exact reasons", "[shared][container]") {
  TinyContainer c;
  SECTION("wrong magic") {
    c.patch(c.bank(1), 0, "XXXX", 4);
    REQUIRE(c.read_error(1, 0) == "expert 0 of layer 1: bad magic 0x58585858");
  }
  SECTION("a record spliced from another layer") {
    const std::string l1 = c.read(c.bank(1));
    c.patch(c.bank(2), 2 * kRec, l1.data() + 2 * kRec, kRec);
    REQUIRE(c.read_error(2, 2) == "expert 2 of layer 2: layer field 1 != 2");
  }
  SECTION("the record of another expert") {
    const std::string l1 = c.read(c.bank(1));
    c.patch(c.bank(1), 4 * kRec, l1.data() + 5 * kRec, kRec);
    REQUIRE(c.read_error(1, 4) == "expert 4 of layer 1: expert id field 5 != 4");
  }
  SECTION("bad offsets") {
    c.patch_value<std::uint32_t>(1, 0, 24, 6192);  // up_off = down_off
    REQUIRE(c.read_error(1, 0) ==
            "expert 0 of layer 1: offsets not ordered (gate 48, up 6192, down 6192, scales 9264, record 12288)");
  }
  SECTION("an index span overlapping the next matrix") {
    c.patch_value<std::uint32_t>(1, 0, 28, 6000);  // down_off inside up's indices
    REQUIRE(c.read_error(1, 0) ==
            "expert 0 of layer 1: offsets not ordered (gate 48, up 3120, down 6000, scales 9264, record 12288)");
  }
  SECTION("scales running past the record") {
    c.patch_value<std::uint32_t>(1, 0, 32, 12188);
    REQUIRE(c.read_error(1, 0) == "expert 0 of layer 1: scales overrun the record (12188 + 512 > 12288)");
  }
  SECTION("page count") {
    c.patch_value<std::uint32_t>(1, 6, 16, 2);
    REQUIRE(c.read_error(1, 6) == "expert 6 of layer 1: rec_4k_blocks 2 * 4096 != record size 12288");
  }
  SECTION("fmt byte") {
    c.patch_value<std::uint8_t>(3, 1, 8, 8);
    REQUIRE(c.read_error(3, 1) == "expert 1 of layer 3: fmt 8 does not match the manifest's VQ3R (expected 4 or 5)");
  }
  SECTION("lowrank id") {
    c.patch_value<std::uint16_t>(1, 0, 12, 1);
    REQUIRE(c.read_error(1, 0) == "expert 0 of layer 1: lowrank_id 1 != 0");
  }
  SECTION("codebook out of range") {
    c.patch_value<std::uint16_t>(1, 0, 10, 20);
    REQUIRE(c.read_error(1, 0) == "expert 0 of layer 1: codebook 20 + 9 books exceeds the 27 in codebooks.bin");
  }
  SECTION("a header-only buffer") {
    const ExpertQuant q;
    ModelConfig cfg;
    std::vector<std::byte> small(20);
    auto g = ExpertGeometry{};
    auto s = validate_record_header(small, 1, 0, q, g, 27);
    REQUIRE(s.error().message == "expert 0 of layer 1: record of 20 bytes is shorter than its 48-byte header");
  }
}

TEST_CASE("manifest damage gives exact messages", "[shared][container]") {
  TinyContainer c;
  const json good = c.manifest();
  REQUIRE(parse_error(good).empty());
  SECTION("format_version 1") {
    json j = good;
    j["format_version"] = 1;
    const std::string newer = "format_version 1 is newer than this build of WASTE reads (0); update WASTE to open this container";
    REQUIRE(parse_error(j) == newer);
    c.set_manifest(j);
    REQUIRE(c.open_error() == (c.dir.path() / "manifest.json").string() + ": " + newer);
  }
  SECTION("format_version -1") {
    json j = good;
    j["format_version"] = -1;
    REQUIRE(parse_error(j) == "format_version -1 is not supported (expected 0)");
  }
  SECTION("format_version missing") {
    json j = good;
    j.erase("format_version");
    REQUIRE(parse_error(j) == "format_version is missing (expected 0)");
  }
  SECTION("missing trunk") {
    json j = good;
    j.erase("trunk");
    REQUIRE(parse_error(j) == "manifest: missing field \"trunk\"");
  }
  SECTION("missing bank field") {
    json j = good;
    j["layers"]["2"].erase("bytes");
    REQUIRE(parse_error(j) == "layers.2: missing field \"bytes\"");
  }
  SECTION("missing bank") {
    json j = good;
    j["layers"].erase("3");
    REQUIRE(parse_error(j) == "layers: MoE layer 3 has no expert bank entry");
  }
  SECTION("bank on a dense layer") {
    json j = good;
    j["layers"]["0"] = j["layers"]["1"];
    REQUIRE(parse_error(j) == "layers.0: layer 0 is not a MoE layer of this config");
  }
  SECTION("bank file escaping the directory") {
    json j = good;
    j["layers"]["1"]["file"] = "../../etc/passwd";
    REQUIRE(parse_error(j) == "layers.1.file: \"../../etc/passwd\" is not a plain file name");
  }
  SECTION("absurd hidden size") {
    json j = good;
    j["config"]["hidden_size"] = 1 << 30;
    REQUIRE(parse_error(j) == "config.hidden_size: 1073741824 is out of range 1..1048576");
  }
  SECTION("absurd layer count") {
    json j = good;
    j["config"]["num_hidden_layers"] = 100000;
    REQUIRE(parse_error(j) == "config.num_hidden_layers: 100000 is out of range 1..128");
  }
  SECTION("top-k above the expert count") {
    json j = good;
    j["config"]["num_experts_per_token"] = 9;
    REQUIRE(parse_error(j) == "config.num_experts_per_token: 9 is out of range 0..8");
  }
  SECTION("absurd tensor dimension") {
    json j = good;
    j["trunk"][0]["shape"] = {std::int64_t{1} << 40, 128};
    REQUIRE(parse_error(j) == "trunk tensor lm_head.weight: shape dimension 1099511627776 is out of range 1..67108864");
  }
  SECTION("unsupported trunk fmt") {
    json j = good;
    j["trunk"][0]["fmt"] = 1;
    REQUIRE(parse_error(j) == "trunk tensor lm_head.weight: fmt 1 is not a trunk format (F32 0, Q8G 2, Q4G 3, Q3G 7)");
  }
  SECTION("index_bits 6 without VQ4P geometry") {
    json j = good;
    j["expert_quant"]["index_bits"] = 6;
    REQUIRE(parse_error(j) == "expert_quant.index_bits: 6 (must be 8, or 6 with stages 4 and entries 64)");
  }
  SECTION("tensor past the end of trunk.bin") {
    json j = good;
    j["trunk"][0]["off"] = 10'000'000;
    c.set_manifest(j);
    REQUIRE(c.open_error() == (c.dir.path() / "trunk.bin").string() +
                                  ": trunk tensor lm_head.weight: payload [10000000, 10032768) exceeds trunk.bin size 386152");
  }
  SECTION("wrong tensor shape") {
    json j = good;
    for (auto& t : j["trunk"]) {
      if (t["name"] == "model.layers.2.self_attn.kv_b_proj.weight") t["shape"] = {128, 16};
    }
    REQUIRE(parse_error(j).empty());
    c.set_manifest(j);
    REQUIRE(c.open_error() == (c.dir.path() / "manifest.json").string() +
                                  ": tensor model.layers.2.self_attn.kv_b_proj.weight: expected shape [128, 32], found [128, 16]");
  }
  SECTION("record size that is not a page multiple") {
    json j = good;
    j["layers"]["1"]["bytes"] = 8 * 12000;
    std::filesystem::resize_file(c.bank(1), 8 * 12000);
    c.set_manifest(j);
    REQUIRE(c.open_error() == "layer 1 (experts-L1.bin): record size 12000 is not a multiple of 4096");
  }
  SECTION("not JSON at all") {
    REQUIRE(Manifest::parse("{\"format_version\": 0,").error().message == "manifest.json is not valid JSON");
  }
}
