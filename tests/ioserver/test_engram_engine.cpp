// Issue 29: an engine opened through waste-ioserver on a DeepSeek-V4.1 container with Engram
// tables reads the Engram rows from the daemon's shared page pool (open_expert_plane ->
// open_daemon_engram_rows: DaemonEngramRows on a second connection), not from its own file
// reads: its logits equal, bit for bit, those of an engine over the engine's own EngramRowSource,
// and the daemon's per-table Engram counters (its `stats` reply) count the rows it served.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "compute/api/engine_open.hpp"
#include "compute/engram/engram_synth.hpp"
#include "compute/io/daemon_connect.hpp"
#include "shared/ipc/control_client.hpp"
#include "shared/synth/synth.hpp"
#include "test_control_support.hpp"
#include "test_support.hpp"

using namespace waste;

#ifdef WASTE_IOSERVER_BIN

namespace {

namespace fs = std::filesystem;

// tiny-v41 with Engram on layer 1 (2- and 3-grams, 2 heads: 4 rows of 32 per token, 240 rows),
// as tests/compute/test_v41_run.cpp's engram_container(true); built once under the build tree
// and renamed into place so parallel test processes never see half a container.
fs::path engram_container() {
  const auto root = fs::path(WASTE_BINARY_DIR) / "test-data";
  const auto dir = root / "ioserver-tiny-v41-engram";
  if (fs::exists(dir / "manifest.json")) return dir;
  auto preset = synth::load_preset("tiny-v41");
  REQUIRE(preset);
  nlohmann::json j = *preset;
  j["engram_layer_ids"] = {1};
  j["engram_num_embeddings"] = {240};
  j["engram_vocab_size"] = 50;
  j["engram_max_ngram_size"] = 3;
  j["engram_n_heads"] = 2;
  j["engram_head_dim"] = 32;
  j["engram_pad_id"] = 2;
  j["engram_compressed_vocab_size"] = 200;
  synth::SynthRequest request;
  request.preset = "tiny-v41";
  auto spec = synth::make_spec(j, request);
  if (!spec) FAIL(spec.error().message);
  const auto tmp = root / (dir.filename().string() + ".tmp" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  auto written = synth::write_container(*spec, tmp);
  if (!written) FAIL(written.error().message);
  engram::SynthEngramRequest r;
  r.seed = 7;
  r.bits = 8;
  auto tables = engram::write_synthetic_engram(spec->skeleton.config, tmp, r);
  if (!tables) FAIL(tables.error().message);
  std::error_code ec;
  fs::rename(tmp, dir, ec);
  if (ec) fs::remove_all(tmp);  // another process won the race
  REQUIRE(fs::exists(dir / "manifest.json"));
  return dir;
}

EngineOptions options_for(const fs::path& model) {
  EngineOptions o;
  o.model = model;
  o.threads = 1;
  o.ctx_tokens = 64;
  o.lookahead = 0;
  return o;
}

// A 9-token prompt then 5 decode steps: the logits after each feed.
std::vector<std::vector<float>> run(Engine& engine) {
  std::vector<std::vector<float>> out;
  const std::vector<int> prompt{3, 40, 77, 114, 151, 188, 225, 12, 49};
  auto l = engine.eval(prompt, {}, FeedKind::prompt);
  if (!l) FAIL(l.error().message);
  out.emplace_back(l->begin(), l->end());
  for (int tok : {86, 123, 160, 197, 234}) {
    auto s = engine.eval(std::span<const int>(&tok, 1), {}, FeedKind::decode);
    if (!s) FAIL(s.error().message);
    out.emplace_back(s->begin(), s->end());
  }
  return out;
}

}  // namespace

TEST_CASE("an engine through waste-ioserver reads its Engram rows from the daemon's page pool, bit for bit",
          "[ioserver][engine_open][engram]") {
  test::ScopedRuntimeDir runtime;
  ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
  ::setenv("WASTE_LINGER_MS", "0", 1);
  const fs::path model = engram_container();
  auto container = read_container(model);
  REQUIRE(container);

  // The reference: the in-process plane with the engine's own EngramRowSource.
  std::vector<std::vector<float>> own_logits;
  {
    EngineOptions o = options_for(model);
    o.cache_records = 8;
    auto parts = open_expert_plane(o, **container);
    if (!parts) FAIL(parts.error().message);
    parts->engram_rows.reset();
    parts->engram_tables.reset();
    parts->engram_note = "reference";
    auto own = Engine::open(o, *container, std::move(*parts));
    if (!own) FAIL(own.error().message);
    CHECK((*own)->engram_origin() == "Engram rows: read by this process (reference)");
    own_logits = run(**own);
  }

  OpenRequest r;
  r.engine = options_for(model);
  r.container = *container;
  auto opened = open_engine(r);
  if (!opened) FAIL(opened.error().message);
  REQUIRE(opened->via_daemon);
  REQUIRE((*opened)->daemon() != nullptr);
  const int daemon_pid = (*opened)->daemon()->daemon().pid;
  CHECK((*opened)->engram_origin() ==
        "Engram rows: waste-ioserver's shared page pool (pid " + std::to_string(daemon_pid) + ")");
  const auto daemon_logits = run(**opened);
  REQUIRE(daemon_logits.size() == own_logits.size());
  for (std::size_t i = 0; i < own_logits.size(); ++i) {
    INFO("feed " << i);
    REQUIRE(daemon_logits[i].size() == own_logits[i].size());
    CHECK(std::memcmp(daemon_logits[i].data(), own_logits[i].data(), own_logits[i].size() * sizeof(float)) == 0);
  }

  // 14 tokens x 4 rows of the one Engram table, every one through the daemon's pool.
  const auto reader = (*opened)->engram_stats();
  REQUIRE(reader);
  CHECK(reader->hits + reader->misses == 56);
  auto stats = ipc::ControlClient::connect((*opened)->daemon()->daemon().socket)->stats();
  if (!stats) FAIL(stats.error().message);
  const auto& tables = (*stats)["engram"]["tables"];
  REQUIRE(tables.size() == 1);
  CHECK(tables[0]["layer"] == 1);
  CHECK(tables[0]["rows"] == 240);
  CHECK(tables[0]["pages"] == 2);
  INFO(tables.dump());
  // The daemon counts page demands: each of the 6 feeds asks for both pages once (a hit, or a
  // miss when the forward's prefetch of that page is still being read), and reads each page
  // exactly once (the pool holds both): the rows came through the pool, not the engine's reads.
  CHECK(tables[0]["hits"].get<std::uint64_t>() + tables[0]["misses"].get<std::uint64_t>() == 12);
  CHECK(tables[0]["reads"] == 2);
  CHECK(tables[0]["bytes_read"] == 2 * 4096);
  CHECK(tables[0]["read_errors"] == 0);
  // Two leases of this process: the expert source's and the Engram reader's.
  CHECK((*stats)["clients"].size() == 2);

  // A second engine on the same daemon shares the pool: the same bits, its 12 page demands all
  // served from the pages the first one had read (no new read).
  auto second = open_engine(r);
  if (!second) FAIL(second.error().message);
  REQUIRE(second->via_daemon);
  CHECK((*second)->daemon()->daemon().pid == daemon_pid);
  const auto second_logits = run(**second);
  REQUIRE(second_logits.size() == own_logits.size());
  for (std::size_t i = 0; i < own_logits.size(); ++i) {
    INFO("second engine, feed " << i);
    CHECK(std::memcmp(second_logits[i].data(), own_logits[i].data(), own_logits[i].size() * sizeof(float)) == 0);
  }
  auto shared = ipc::ControlClient::connect((*opened)->daemon()->daemon().socket)->stats();
  if (!shared) FAIL(shared.error().message);
  const auto& after = (*shared)["engram"]["tables"][0];
  INFO(after.dump());
  CHECK(after["hits"].get<std::uint64_t>() == tables[0]["hits"].get<std::uint64_t>() + 12);
  CHECK(after["misses"] == tables[0]["misses"]);
  CHECK(after["reads"] == 2);
  CHECK((*shared)["clients"].size() == 4);
  ::unsetenv("WASTE_LINGER_MS");
}

#endif  // WASTE_IOSERVER_BIN
