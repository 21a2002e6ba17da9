// The memory plan's state and scratch figures against what an engine's RunState and Forward
// really allocate, on synthetic presets: the plan is computed from the validated manifest with
// the sizing function the allocators use (shared/memory/client_sizing), so it must cover them.
// The pieces are assembled as Engine::open does, so their byte counts can be read.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "compute/forward/forward.hpp"
#include "local_expert_source.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/model/run_state.hpp"
#include "compute/model/weights.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "shared/container/codebooks.hpp"
#include "shared/container/container.hpp"
#include "shared/memory/client_sizing.hpp"
#include "shared/memory/memory_plan.hpp"
#include "shared/synth/synth.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

struct Allocated {
  std::uint64_t state = 0, scratch = 0;
};

// Open `dir` like Engine::open with prefill chunk `chunk`, decode a prompt by chunked prefill
// (allocates the chunk buffers; above 64, a prompt of more than 64 tokens in one pass) and one
// step, and report the bytes RunState and Forward (+ the logits) hold.
Allocated run_and_measure(const std::filesystem::path& dir, int ctx, int chunk) {
  auto info = ContainerInfo::open(dir);
  INFO((info ? std::string() : info.error().message));
  REQUIRE(info);
  const ModelConfig& c = info->manifest.config;
  auto trunk = Trunk::load(dir, info->manifest);
  REQUIRE(trunk);
  auto books = Codebooks::load(info->files.codebooks(), info->manifest.quant);
  REQUIRE(books);
  auto weights = model::ModelWeights::bind(c, *trunk);
  REQUIRE(weights);
  auto source = LocalExpertSource::open(*info, LocalSourceOptions{false, true, 0, 0, false});
  REQUIRE(source);
  auto state = model::RunState::create(c, ctx);
  REQUIRE(state);
  ThreadPool pool(2);
  std::vector<int> codebook_base(std::size_t(c.n_layers), -1);
  for (const auto& [layer, bank] : info->manifest.banks) codebook_base[std::size_t(layer)] = bank.codebook_base;
  forward::Forward fwd(forward::Forward::Inputs{c, *weights, *trunk, *books, info->geometry, **source, pool,
                                                kernels::active(), ctx, codebook_base, 0, chunk});
  REQUIRE(fwd.prefill_capacity() == std::max(chunk, 64));
  // The chunk working set is there before the first prefill (allocated when Forward is built):
  // the first prefill allocates nothing more.
  const std::uint64_t built = fwd.scratch_bytes();
  std::vector<float> logits(std::size_t(c.vocab));
  std::vector<int> prompt = {1, 5, 7};
  if (chunk > 64) {
    prompt.clear();
    for (int i = 0; i < std::min(chunk, ctx - 1); ++i) prompt.push_back((i * 53 + 11) % c.vocab);
    REQUIRE(prompt.size() > 64);
  }
  auto pre = fwd.prefill(prompt, *state, logits);
  INFO((pre ? std::string() : pre.error().message));
  REQUIRE(pre);
  CHECK(fwd.scratch_bytes() == built);
  auto step = fwd.step(3, *state, logits);
  REQUIRE(step);
  return {state->allocated_bytes(), fwd.scratch_bytes() + logits.capacity() * sizeof(float)};
}

void check_plan_covers(const std::filesystem::path& dir, int ctx, int chunk = 64) {
  auto plan = plan_memory(dir, std::uint32_t(ctx), chunk);
  INFO((plan ? std::string() : plan.error().message));
  REQUIRE(plan);
  const Allocated got = run_and_measure(dir, ctx, chunk);
  INFO("plan state " << plan->state_bytes << " scratch " << plan->scratch_bytes << "; allocated state "
                     << got.state << " scratch " << got.scratch);
  REQUIRE(got.state > 0);
  REQUIRE(got.scratch > 0);
  CHECK(plan->state_bytes + plan->scratch_bytes >= got.state + got.scratch);
  CHECK(plan->state_bytes >= got.state);
  CHECK(plan->scratch_bytes >= got.scratch);
  // Allocated through the same sizing: nothing is over-counted either.
  CHECK(plan->state_bytes == got.state);
  CHECK(plan->scratch_bytes == got.scratch);
}

}  // namespace

TEST_CASE("memory plan covers the state and scratch an engine allocates (tiny, tiny-k3)", "[compute][memory]") {
  for (const char* preset : {"tiny", "tiny-k3"}) {
    INFO("preset " << preset);
    for (int ctx : {16, 300}) {
      INFO("ctx " << ctx);
      check_plan_covers(test::synth_container(preset), ctx);
    }
    // Chunks above 64: a pass of 128 (and of 299 in chunk buffers of 512) allocates what the
    // plan counts for that chunk; chunk 1 keeps the 64-token buffers.
    for (int chunk : {128, 512, 1}) {
      INFO("chunk " << chunk);
      check_plan_covers(test::synth_container(preset), 300, chunk);
    }
  }
}

TEST_CASE("the plan's chunk buffers grow with the prefill chunk, its gate/up LUT rows stay at 64", "[compute][memory]") {
  const auto dir = test::synth_container("tiny");
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  const ModelConfig& c = info->manifest.config;
  const std::uint64_t lut = sizing::lut_floats(info->geometry, 0);
  REQUIRE(lut > 0);
  const sizing::PrefillMoeSizes at64 = sizing::prefill_moe_sizes(c, info->geometry, 64);
  const sizing::PrefillMoeSizes at512 = sizing::prefill_moe_sizes(c, info->geometry, 512);
  CHECK(at64.lut == 64 * lut);
  CHECK(at512.lut == 64 * lut);  // prompt tokens take no LUT rows
  CHECK(at512.lut_rows == 64);
  CHECK(sizing::prefill_moe_sizes(c, info->geometry, 7).lut == 7 * lut);
  CHECK(at512.lut_slots == 512);
  CHECK(at512.router == 8 * at64.router);
  auto p64 = plan_memory(dir, 300, 64);
  auto p1 = plan_memory(dir, 300, 1);
  auto p512 = plan_memory(dir, 300, 512);
  REQUIRE(p64);
  REQUIRE(p1);
  REQUIRE(p512);
  CHECK(p1->scratch_bytes == p64->scratch_bytes);
  CHECK(p512->scratch_bytes > p64->scratch_bytes);
  CHECK(p512->state_bytes == p64->state_bytes);
  CHECK(p512->scratch_bytes == sizing::client_sizes(c, info->geometry, 300, 512).scratch_bytes());
  CHECK(plan_memory(dir, 300, 513).error().message == "prefill_chunk 513 must be 1..512");
  CHECK(plan_memory(dir, 300, 0).error().message == "prefill_chunk 0 must be 1..512");
}

TEST_CASE("memory plan covers the state and scratch an engine allocates (kimi-linear shape, 4 layers)",
          "[compute][memory]") {
  // Kimi-Linear's widths (hidden 2304, 32 KDA heads of 128, MLA kv_lora 512, expert inter 1024,
  // shared expert, dense first layer) with 4 layers (KDA 0-2, MLA 3), a small vocab and 16 experts.
  auto preset = synth::load_preset("kimi-linear");
  REQUIRE(preset);
  (*preset)["vocab_size"] = 512;
  (*preset)["bos_token_id"] = 1;
  (*preset)["eos_token_id"] = 2;
  (*preset)["pad_token_id"] = 3;
  (*preset)["num_experts"] = 16;
  synth::SynthRequest request;
  request.layers = 4;
  auto spec = synth::make_spec(*preset, request);
  INFO((spec ? std::string() : spec.error().message));
  REQUIRE(spec);
  REQUIRE(spec->skeleton.config.n_kda_layers() == 3);
  REQUIRE(spec->skeleton.config.n_mla_layers() == 1);
  const std::string templ = (std::filesystem::temp_directory_path() / "waste-sizing-XXXXXX").string();
  std::string dir_name = templ;
  REQUIRE(mkdtemp(dir_name.data()) != nullptr);
  const std::filesystem::path dir(dir_name);
  struct Remove {
    std::filesystem::path p;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } remove{dir};
  auto written = synth::write_container(*spec, dir / "model");
  INFO((written ? std::string() : written.error().message));
  REQUIRE(written);
  check_plan_covers(dir / "model", 64);
  check_plan_covers(dir / "model", 200, 512);  // one pass of 199 prompt tokens
  // Prefill's matrix products work in planned rows (no thread-local vectors outside the plan):
  // per chunk token the expert's input and output (lat) and its gate and up rows (inter).
  const ModelConfig& c = spec->skeleton.config;
  auto info = ContainerInfo::open(dir / "model");
  REQUIRE(info);
  const sizing::PrefillMoeSizes z = sizing::prefill_moe_sizes(c, info->geometry, 64);
  CHECK(z.matmul_lat == std::uint64_t(64) * std::uint64_t(c.expert_input_dim()));
  CHECK(z.matmul_inter == std::uint64_t(64) * std::uint64_t(c.moe_inter));
  ExpertGeometry vq4p = info->geometry;
  vq4p.packed6 = true;  // VQ4P keeps the LUT path: nothing planned for the products
  CHECK(sizing::prefill_moe_sizes(c, vq4p, 64).matmul_lat == 0);
}

TEST_CASE("memory plan covers the state and scratch of tiny-glm, its 4 residual streams included", "[compute][memory]") {
  const auto dir = test::synth_container("tiny-glm");
  for (int ctx : {16, 60}) {
    INFO("ctx " << ctx);
    check_plan_covers(dir, ctx);
  }
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  const ModelConfig& c = info->manifest.config;
  // The sequence state keeps hc_mult x hidden floats of stream; the forward pass's x buffers
  // hold every stream of every token of a chunk.
  CHECK(sizing::state_sizes(c, 16).hidden == std::uint64_t(4 * c.hidden));
  CHECK(sizing::forward_sizes(c, 64).pre_stream == std::uint64_t(64 * 4 * c.hidden));
  CHECK(sizing::forward_sizes(c, 1).res_mhc == std::uint64_t(4 * c.hidden + 24 + 4));
  // The DSA indexer: per MLA layer 60 / 4 pooled keys and 2 x 4 rows of the unfilled pool, and
  // its scratch, counted as the indexer's own types allocate them.
  auto shape = forward::KpoolIndexerShape::make(c.index_n_heads, c.index_head_dim, c.index_kpool, c.index_topk,
                                                c.hidden, c.q_lora, c.index_kpool_always_select_tail);
  REQUIRE(shape);
  CHECK(sizing::state_sizes(c, 60).index_state == std::uint64_t((15 + 8) * c.index_head_dim));
  CHECK(sizing::state_sizes(c, 60).index_state * sizeof(float) == forward::KpoolIndexerState::bytes(*shape, 60));
  CHECK(sizing::mla_sizes(c, 60, 64).indexer * sizeof(float) == forward::KpoolIndexerScratch::bytes(*shape, 60, 64));
  ModelConfig dense = c;
  dense.index_n_heads = 0;
  CHECK(sizing::state_sizes(dense, 60).index_state == 0);
}

TEST_CASE("memory plan covers the state and scratch of tiny-v41, its CSA2 windows, sources and scratch included",
          "[compute][memory][v41]") {
  const auto dir = test::synth_container("tiny-v41");
  for (int ctx : {16, 60}) {
    INFO("ctx " << ctx);
    check_plan_covers(dir, ctx);
  }
  check_plan_covers(dir, 200, 128);
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  const ModelConfig& c = info->manifest.config;
  // Per layer an 8 x 32 window; the sources: layer 1 (ratio 2) 30 groups of 32 + 16 floats and
  // its 2 x 2 x 32 partial group, layer 3 (ratio 1) 60 groups and 2 x 1 x 32.
  const sizing::StateSizes s = sizing::state_sizes(c, 60);
  CHECK(s.n_csa_layers == 6);
  CHECK(s.csa_window == 8u * 32u);
  CHECK(s.csa_sources == 30u * 48u + 128u + 60u * 48u + 64u);
  CHECK(s.n_mla_layers == 0);
}

}  // namespace waste
