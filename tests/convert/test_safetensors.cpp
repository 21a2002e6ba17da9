// The safetensors header parser against hand-made files: a valid one, and one file per rule of
// the reference reader, each refused with its own message (hazard: a view outside the mapping).
#include <catch2/catch.hpp>

#include <cstring>

#include "compute/convert/safetensors.hpp"
#include "tests/convert/checkpoint_fixture.hpp"
#include "tests/shared/temp_dir.hpp"

using namespace waste;
using namespace waste::convert;

namespace {

std::string with_header(const std::string& json_text, const std::string& data, std::uint64_t claimed = ~0ull) {
  std::string out(8, '\0');
  const std::uint64_t n = claimed == ~0ull ? json_text.size() : claimed;
  std::memcpy(out.data(), &n, 8);
  return out + json_text + data;
}

Result<SafetensorsHeader> parse(const std::string& file) {
  return parse_safetensors_header(std::as_bytes(std::span(file.data(), file.size())), file.size(), "f.safetensors");
}

std::string error_of(const std::string& file) {
  auto r = parse(file);
  REQUIRE_FALSE(r.has_value());
  return r.error().message;
}

}  // namespace

TEST_CASE("a valid header gives every tensor with its dtype, shape and offsets", "[convert][safetensors]") {
  const std::string file = with_header(
      R"({"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[4,16]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("__metadata__":{"format":"pt"}})",
      std::string(16, 'x'));
  auto h = parse(file);
  REQUIRE(h.has_value());
  REQUIRE(h->tensors.size() == 2);
  CHECK(h->tensors[0].name == "a");  // sorted by name
  CHECK(h->tensors[1].dtype == Dtype::bf16);
  CHECK(h->tensors[1].shape == std::vector<std::int64_t>{2, 3});
  CHECK(h->tensors[1].begin == 4);
  CHECK(h->data_start == 8 + file.size() - 8 - 16);
  CHECK(h->metadata.at("format") == "pt");
  REQUIRE(h->find("b") != nullptr);
  CHECK(h->find("c") == nullptr);
}

TEST_CASE("scalars and empty tensors are accepted", "[convert][safetensors]") {
  auto h = parse(with_header(R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"F16","shape":[0,5],"data_offsets":[4,4]}})",
                             std::string(4, 'x')));
  REQUIRE(h.has_value());
  CHECK(h->find("s")->elements() == 1);
  CHECK(h->find("e")->bytes() == 0);
}

TEST_CASE("malformed headers are refused with the rule they break", "[convert][safetensors]") {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  CHECK(error_of("1234") == "f.safetensors: shorter than the 8-byte header length");
  CHECK(error_of(with_header("{}", "", 200'000'000)) == "f.safetensors: header length 200000000 exceeds 100000000");
  CHECK(error_of(with_header("{}", "", 64)) == "f.safetensors: header length 64 runs past the end of the 10-byte file");
  CHECK(error_of(with_header(" {}", "")) == "f.safetensors: header does not begin with '{'");
  CHECK(error_of(with_header("{\"a\":", "")) == "f.safetensors: header is not a valid UTF-8 JSON object");
  CHECK(error_of(with_header("{\"\xff\":1}", "")) == "f.safetensors: header is not a valid UTF-8 JSON object");
  CHECK(error_of(with_header("{" + ok_entry + "," + ok_entry + "}", "xxxx")) == "f.safetensors: header has duplicate tensor names");
  CHECK(error_of(with_header(R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", "xxxx")) ==
        "f.safetensors: tensor a: unknown dtype F7");
  CHECK(error_of(with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "xxxx")) ==
        "f.safetensors: tensor a: shape entries must be non-negative integers");
  CHECK(error_of(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "xxxx")) ==
        "f.safetensors: tensor a: data_offsets must be an array of two integers");
  CHECK(error_of(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx")) ==
        "f.safetensors: tensor a: data_offsets span 4 bytes, shape and dtype need 8");
  CHECK(error_of(with_header(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", "xx")) ==
        "f.safetensors: tensor a: size is not a whole number of bytes");
  CHECK(error_of(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "xxxx")) ==
        "f.safetensors: tensor a: data_offsets end before they begin");
  // A gap, an overlap, trailing bytes, and a buffer shorter than the offsets claim.
  CHECK(error_of(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "xxxxxxxx")) ==
        "f.safetensors: tensor a: data begins at 4, expected 0 (gap or overlap)");
  CHECK(error_of(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                             "xxxxxx")) == "f.safetensors: tensor b: data begins at 2, expected 4 (gap or overlap)");
  const std::string trailing = with_header("{" + ok_entry + "}", "xxxxyy");
  CHECK(error_of(trailing) == "f.safetensors: tensors end at byte " + std::to_string(trailing.size() - 2) +
                                  " but the file has " + std::to_string(trailing.size()));
  const std::string short_buf = with_header("{" + ok_entry + "}", "xx");
  CHECK(error_of(short_buf) == "f.safetensors: tensors end at byte " + std::to_string(short_buf.size() + 2) +
                                   " but the file has " + std::to_string(short_buf.size()));
  CHECK(error_of(with_header(R"({"a":{"dtype":"U8","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})", "")) ==
        "f.safetensors: tensor a: size overflows");
}

TEST_CASE("a sharded checkpoint finds each tensor in the shard the weight map names", "[convert][safetensors]") {
  test::TempDir dir("st-shards");
  test::StTensor a{"a", "F32", {1}, {0, 0, 128, 63}};
  test::StTensor b{"b", "U8", {2}, {7, 9}};
  test::write_file(dir.path() / "s1.safetensors", test::safetensors_bytes({a}));
  test::write_file(dir.path() / "s2.safetensors", test::safetensors_bytes({b}));
  test::write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  auto ck = Checkpoint::open(dir.path());
  REQUIRE(ck.has_value());
  auto rb = ck->find("b");
  REQUIRE(rb.has_value());
  CHECK(rb->shard->filename() == "s2.safetensors");
  CHECK(std::to_integer<int>(rb->data[1]) == 9);
  CHECK(ck->names() == std::vector<std::string>{"a", "b"});
  CHECK(ck->total_bytes() == 6);

  // The map names a tensor its shard does not hold.
  test::write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map":{"a":"s2.safetensors"}})");
  auto bad = Checkpoint::open(dir.path());
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message == "tensor a is not in shard " + (dir.path() / "s2.safetensors").string() + " (weight_map says it is)");
  // A shard name that escapes the directory.
  test::write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map":{"a":"../s1.safetensors"}})");
  auto escape = Checkpoint::open(dir.path());
  REQUIRE_FALSE(escape.has_value());
  CHECK(escape.error().message.ends_with("weight_map.a: shard ../s1.safetensors is not a file name"));
}

TEST_CASE("mutated headers never yield a tensor outside the file (deterministic fuzz)", "[convert][safetensors][fuzz]") {
  const std::string base = with_header(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3,1],"data_offsets":[8,11]}})",
      std::string(11, 'z'));
  std::uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return std::uint32_t(state >> 33);
  };
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string f = base;
    const int edits = 1 + int(next() % 4);
    for (int k = 0; k < edits; ++k) {
      const std::size_t pos = next() % f.size();
      switch (next() % 4) {
        case 0: f[pos] = char(next()); break;                       // flip a byte
        case 1: f[pos] = "0123456789[]{},:\""[next() % 17]; break;  // JSON-ish byte
        case 2: f.erase(pos, 1); break;                              // shorten
        default: f.insert(pos, 1, char(next())); break;              // lengthen
      }
    }
    auto h = parse(f);
    if (!h) continue;
    ++accepted;
    for (const auto& t : h->tensors) {
      REQUIRE(t.end >= t.begin);
      REQUIRE(h->data_start + t.end <= f.size());
    }
  }
  INFO("accepted mutants: " << accepted);
  CHECK(accepted < 20000);
}
