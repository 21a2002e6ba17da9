// The embedding table resident when the budget allows (compute/model/resident_tensor.hpp): the
// same logits as the disk path, bit for bit, in decode steps and prefill chunks; the budget rule
// (embedding_resident) and the arena it leaves; Trunk::read_tensor_bytes' size check.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/api/engine_open.hpp"
#include "compute/model/resident_tensor.hpp"
#include "shared/container/container.hpp"
#include "shared/container/trunk.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/memory_plan.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

std::unique_ptr<Engine> open_with(const std::filesystem::path& dir, bool resident_embedding) {
  EngineOptions options;
  options.model = dir;
  options.threads = 2;
  options.ctx_tokens = 64;
  options.resident_embedding = resident_embedding;
  auto engine = Engine::open(options);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("A resident embedding table gives the disk path's logits bit for bit", "[compute][embedding]") {
  const auto dir = test::container_for("kl-shaped");  // Q4G trunk: embed_tokens stays on disk
  auto plan = plan_memory(dir, 64);
  REQUIRE(plan);
  REQUIRE(plan->embed_bytes > 0);

  auto disk = open_with(dir, false);
  auto resident = open_with(dir, true);
  CHECK(disk->info().embedding_resident_bytes == 0);
  CHECK(resident->info().embedding_resident_bytes == plan->embed_bytes);
  // The image itself is unchanged: the table is the client's own.
  CHECK(resident->info().trunk_resident_bytes == disk->info().trunk_resident_bytes);

  // A prefill chunk (run_tokens) then decode steps (step), tokens spread over the vocabulary.
  const int vocab = disk->info().vocab;
  const std::vector<int> prompt = {0, 1, vocab / 2, vocab - 1, 77 % vocab, 300 % vocab};
  auto a = disk->eval(prompt);
  REQUIRE(a);
  const std::vector<float> a_prefill(a->begin(), a->end());
  auto b = resident->eval(prompt);
  REQUIRE(b);
  CHECK(same_bits(a_prefill, *b));
  for (int token : {vocab - 1, 5, vocab / 3}) {
    const int one[1] = {token};
    auto x = disk->eval(one);
    REQUIRE(x);
    const std::vector<float> xs(x->begin(), x->end());
    auto y = resident->eval(one);
    REQUIRE(y);
    CHECK(same_bits(xs, *y));
  }
}

TEST_CASE("The embedding table is resident only when the budget covers the recommended plan plus the table",
          "[compute][embedding]") {
  const auto dir = test::container_for("kl-shaped");
  auto plan = plan_memory(dir, 64);
  REQUIRE(plan);
  const std::uint64_t threshold = plan->recommended_bytes + plan->embed_bytes;
  CHECK_FALSE(embedding_resident(*plan, threshold - 1));
  CHECK(embedding_resident(*plan, threshold));
  MemoryPlan none = *plan;
  none.embed_bytes = 0;  // nothing on disk (an F32 table lives in the image)
  CHECK_FALSE(embedding_resident(none, threshold * 4));

  // The front ends' arena: the table's bytes come out of the expert cache, not on top of the budget.
  auto below = in_process_cache(dir, 64, std::nullopt, std::to_string(threshold - 1));
  REQUIRE(below);
  CHECK_FALSE(below->resident_embedding);
  CHECK(below->records == arena_slots(*plan, threshold - 1));
  auto at = in_process_cache(dir, 64, std::nullopt, std::to_string(threshold));
  REQUIRE(at);
  CHECK(at->resident_embedding);
  CHECK(at->records == arena_slots(*plan, plan->recommended_bytes));
  CHECK(at->records < arena_slots(*plan, threshold));
  // An explicit record count keeps the disk path (no budget to take the table from).
  auto records = in_process_cache(dir, 64, std::uint64_t{40}, "");
  REQUIRE(records);
  CHECK_FALSE(records->resident_embedding);
}

TEST_CASE("Trunk::read_tensor_bytes refuses a buffer of the wrong size, naming the tensor", "[compute][embedding]") {
  const auto dir = test::container_for("kl-shaped");
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  auto trunk = Trunk::load(dir, info->manifest);
  REQUIRE(trunk);
  const TrunkTensor* embed = trunk->find("model.embed_tokens.weight");
  REQUIRE(embed != nullptr);
  REQUIRE_FALSE(embed->resident());
  const std::uint64_t need = embed->info->payload_bytes() + embed->info->scale_bytes();
  std::vector<std::byte> small(need - 1);
  auto s = trunk->read_tensor_bytes(*embed, small);
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "tensor " + embed->info->name + ": " + std::to_string(need - 1) + " bytes given for " +
                                 std::to_string(need));
  // A resident row equals the disk row for the first and last rows.
  auto table = model::ResidentTensor::load(*trunk, *embed);
  REQUIRE(table);
  REQUIRE(table->tensor().resident());
  const std::int64_t cols = embed->info->cols(), rows = embed->info->rows();
  const auto n = static_cast<std::size_t>(cols);
  std::vector<float> x(n), y(n);
  for (std::int64_t r : {std::int64_t{0}, rows - 1}) {
    REQUIRE(trunk->read_row(*embed, r, x));
    REQUIRE(trunk->read_row(table->tensor(), r, y));
    CHECK(same_bits(x, y));
  }
}

}  // namespace waste
