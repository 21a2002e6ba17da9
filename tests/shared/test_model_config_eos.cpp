// config.eos_token_id as an int or a list (GLM-5.3-Flash: end of text and two turn markers): the
// first id is the primary eos, all of them are kept; malformed lists are refused by name.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "shared/container/model_config.hpp"
#include "shared/synth/synth.hpp"

using namespace waste;
using nlohmann::json;

namespace {
json tiny() {
  auto preset = synth::load_preset("tiny");
  REQUIRE(preset.has_value());
  json j = *preset;
  j.erase("synth");
  return j;
}
}  // namespace

TEST_CASE("an eos_token_id list keeps every id and makes the first the primary eos", "[shared][config]") {
  json c = tiny();
  c["eos_token_id"] = {154820, 154827, 154829};
  auto m = ModelConfig::from_json(c);
  if (!m) FAIL(m.error().message);
  CHECK(m->eos_token_id == 154820);
  CHECK(m->eos_token_ids == std::vector<int>{154820, 154827, 154829});
  // Written back as the list.
  CHECK(m->to_json()["eos_token_id"] == json({154820, 154827, 154829}));

  c["eos_token_id"] = 163586;  // an int, as before
  m = ModelConfig::from_json(c);
  REQUIRE(m.has_value());
  CHECK(m->eos_token_id == 163586);
  CHECK(m->eos_token_ids == std::vector<int>{163586});
  CHECK(m->to_json()["eos_token_id"] == 163586);

  c.erase("eos_token_id");
  m = ModelConfig::from_json(c);
  REQUIRE(m.has_value());
  CHECK(m->eos_token_id == 0);
  CHECK(m->eos_token_ids.empty());
}

TEST_CASE("hazard: a malformed eos_token_id list is refused naming the entry", "[shared][config]") {
  json c = tiny();
  c["eos_token_id"] = {154820, "x"};
  auto bad = ModelConfig::from_json(c);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "config.eos_token_id: entry \"x\" is not a token id 0..16777216");
  c["eos_token_id"] = {5, -1};
  bad = ModelConfig::from_json(c);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "config.eos_token_id: entry -1 is not a token id 0..16777216");
  c["eos_token_id"] = json::array();
  bad = ModelConfig::from_json(c);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "config.eos_token_id: a list must hold 1..64 token ids, found 0");
  // The int form keeps its old message.
  c["eos_token_id"] = 1 << 25;
  bad = ModelConfig::from_json(c);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "config.eos_token_id: 33554432 is out of range 0..16777216");
}
