#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "compute/tokenizer/tokenizer.hpp"
#include "shared/synth/synthetic_tokenizer.hpp"

namespace {

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("waste-synth-tok-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("Synthetic tokenizer: layout, specials and vocab", "[tokenizer]") {
  const auto dir = fresh_dir("layout");
  REQUIRE(waste::synth::write_synthetic_tokenizer(dir, 0).has_value());
  const auto tok = waste::Tokenizer::load(dir);
  REQUIRE(tok.has_value());
  const int base = waste::synth::kSyntheticBaseTokens;
  CHECK(tok->n_base() == base);
  CHECK(tok->vocab() == waste::synth::synthetic_tokenizer_vocab());
  CHECK(waste::synth::synthetic_tokenizer_vocab() == base + 11);
  CHECK(tok->bos() == base);
  CHECK(tok->eos() == base + 2);
  CHECK(tok->decode_token(base) == "[BOS]");
  CHECK(tok->decode_token(base + 2) == "<|end_of_msg|>");
  CHECK(tok->decode_token(base + 10) == "<|kimi_image_placeholder|>");
  // Ranks 0..255 are the bytes themselves.
  for (int b = 0; b < 256; ++b) REQUIRE(tok->decode_token(b) == std::string(1, static_cast<char>(b)));
  std::filesystem::remove_all(dir);
}

TEST_CASE("Synthetic tokenizer: the merges compress its kind of text", "[tokenizer]") {
  const auto dir = fresh_dir("compress");
  REQUIRE(waste::synth::write_synthetic_tokenizer(dir, 0).has_value());
  const auto tok = waste::Tokenizer::load(dir);
  REQUIRE(tok.has_value());
  const std::string text = "The model reads the text and the router picks the experts.";
  const auto ids = tok->encode(text);
  CHECK(ids.size() * 3 < text.size());
  CHECK(tok->decode(ids) == text);
  // " the" is the commonest word of the corpus: it must be a single token.
  CHECK(tok->encode(" the").size() == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Synthetic tokenizer: same seed same bytes, the seed only reorders ties", "[tokenizer]") {
  const auto a = fresh_dir("seed-a");
  const auto b = fresh_dir("seed-b");
  REQUIRE(waste::synth::write_synthetic_tokenizer(a, 5).has_value());
  REQUIRE(waste::synth::write_synthetic_tokenizer(b, 5).has_value());
  CHECK(slurp(a / "tokenizer.model") == slurp(b / "tokenizer.model"));
  CHECK(slurp(a / "specials.json") == slurp(b / "specials.json"));
  REQUIRE(waste::synth::write_synthetic_tokenizer(b, 6).has_value());
  CHECK(slurp(a / "tokenizer.model") != slurp(b / "tokenizer.model"));
  const auto tok = waste::Tokenizer::load(b);
  REQUIRE(tok.has_value());
  CHECK(tok->vocab() == waste::synth::synthetic_tokenizer_vocab());
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}

TEST_CASE("Synthetic tokenizer: an unwritable directory is an io error", "[tokenizer]") {
  const auto status = waste::synth::write_synthetic_tokenizer("/nonexistent-waste-dir", 0);
  REQUIRE_FALSE(status.has_value());
  CHECK(status.error().code == waste::Errc::io);
  CHECK(status.error().message == "/nonexistent-waste-dir/tokenizer.model: cannot create");
}
