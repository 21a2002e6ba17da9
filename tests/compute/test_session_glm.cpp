// GLM-5.3-Flash sessions with the k-pool DSA indexer: a session saved mid-prompt, after the
// indexer has turned sparse and with a pool half filled, restores the indexer's pooled keys and
// unfilled pool so that the continuation's logits are bit-identical to an uninterrupted run.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/session/session_file.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Engine> open_glm(int ctx) {
  EngineOptions options;
  options.model = test::synth_container("tiny-glm");
  options.threads = 2;
  options.ctx_tokens = ctx;
  auto engine = Engine::open(options);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

std::vector<int> tokens(int n, int salt) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back((i * 37 + salt) % 250 + 3);
  return out;
}

std::vector<float> logits_of(const Engine& e) { return {e.logits().begin(), e.logits().end()}; }

}  // namespace

TEST_CASE("GLM session saved mid-prompt after the indexer turned sparse continues with identical logits",
          "[compute][session][glm]") {
  const fs::path file = fs::temp_directory_path() / ("waste-glm-session-" + std::to_string(getpid()));
  auto a = open_glm(128);
  const ModelConfig& c = a->config();
  REQUIRE(c.has_indexer());
  REQUIRE(c.index_topk == 16);
  REQUIRE(c.index_kpool == 4);
  // 30 tokens: 7 complete pools (more than the 4 the indexer keeps) and 2 in the unfilled one.
  const std::vector<int> head = tokens(30, 5), rest = tokens(14, 11);
  REQUIRE(a->eval(head));
  std::vector<int> mla_layers;
  for (int L = 0; L < c.n_layers; ++L) {
    if (a->run_state().has_indexer(L)) mla_layers.push_back(L);
  }
  REQUIRE(mla_layers.size() == std::size_t(c.n_mla_layers()));
  REQUIRE_FALSE(mla_layers.empty());
  for (int L : mla_layers) CHECK(a->run_state().indexer_state(L).tokens() == 30);
  REQUIRE(session::save(*a, file));
  // The file holds per MLA layer 7 pooled keys and the k and gate rows of 2 tokens.
  const std::uint64_t index_floats = (7 + 2 * 2) * std::uint64_t(c.index_head_dim);
  CHECK(fs::file_size(file) == session::session_bytes(c, session::make_header(c, a->run_state())));
  session::SessionHeader no_index = session::make_header(c, a->run_state());
  ModelConfig dense = c;
  dense.index_n_heads = 0;
  CHECK(session::session_bytes(c, no_index) - session::session_bytes(dense, no_index) ==
        mla_layers.size() * index_floats * sizeof(float));

  // A file cut inside the indexer state (or without it) is refused by its size.
  std::vector<std::byte> cut = session::encode(c, a->run_state());
  const std::size_t full = cut.size();
  cut.resize(full - 4);
  const Status refused = session::validate(cut, c, a->run_state(), "cut");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "session cut: size " + std::to_string(full - 4) + " bytes != expected " +
                                       std::to_string(full) + " for pos 30");

  REQUIRE(a->eval(rest));
  const std::vector<float> uninterrupted = logits_of(*a);

  auto b = open_glm(128);
  REQUIRE(b->eval(tokens(9, 2)));
  const Status loaded = session::load(*b, file);
  INFO((loaded ? std::string() : loaded.error().message));
  REQUIRE(loaded);
  for (int L : mla_layers) CHECK(b->run_state().indexer_state(L).tokens() == 30);
  REQUIRE(b->eval(rest));
  CHECK(logits_of(*b) == uninterrupted);

  // The restored pooled keys carry the selection: with them zeroed the continuation differs.
  auto d = open_glm(128);
  REQUIRE(session::load(*d, file));
  for (int L : mla_layers) {
    auto buf = d->run_state().indexer_state(L).buffer();
    std::fill(buf.begin(), buf.begin() + 7 * c.index_head_dim, 0.0f);
  }
  REQUIRE(d->eval(rest));
  CHECK(logits_of(*d) != uninterrupted);
  fs::remove(file);
}

}  // namespace waste
