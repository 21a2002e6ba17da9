// Forced tool calls in GLM's flat markup through the C API (waste_generate_tool_call) on a
// tiny-glm synthetic container with configs/chat/glm-5.json: once with the synthetic
// tokenizer, where GLM's markers are plain text, once with specials.json giving them special
// ids. A named call whose values the schema fixes comes out as exact bytes; "required" among
// three tools gives one call whose arguments satisfy the chosen tool's schema; both read back.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../cli/cli_test_support.hpp"
#include "compute/capi/waste.h"

namespace waste {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Seen {
  std::vector<int32_t> tokens;
  std::string text;
};

int seen(void* user, int32_t token, const char* piece, size_t len) {
  auto* s = static_cast<Seen*>(user);
  s->tokens.push_back(token);
  s->text.append(piece, len);
  return 0;
}

// `waste synth --preset tiny-glm --tokenizer --chat-format configs/chat/glm-5.json`; with
// `specials`, the synthetic specials after [BOS] and [EOS] renamed to GLM's markers.
const fs::path& glm_container(bool specials) {
  static test::ScratchDir dirs[2];
  static fs::path models[2];
  fs::path& model = models[specials ? 1 : 0];
  if (model.empty()) {
    const fs::path out = dirs[specials ? 1 : 0].path() / "tiny-glm.waste";
    const test::Ran ran = test::run_waste({"synth", "--preset", "tiny-glm", "--tokenizer", "--chat-format",
                                           std::string(WASTE_SOURCE_DIR) + "/configs/chat/glm-5.json", "--out",
                                           out.string()});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    if (specials) {
      const json before = json::parse(test::slurp(out / "specials.json"));
      REQUIRE(before.size() == 11);
      const std::vector<std::string> texts = {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
                                              "</arg_value>", "<|user|>", "<|assistant|>", "<|system|>"};
      json after = json::array({before[0], before[1]});
      for (std::size_t i = 0; i < texts.size(); ++i) after.push_back({{"id", before[i + 2]["id"]}, {"text", texts[i]}});
      test::write_text(out / "specials.json", after.dump(1));
    }
    model = out;
  }
  return model;
}

struct Model {
  waste_model* m = nullptr;
  explicit Model(const fs::path& dir) {
    waste_open_options o;
    waste_open_options_init(&o);
    o.mode = WASTE_OPEN_IN_PROCESS;
    o.ctx_tokens = 1024;
    o.threads = 1;
    const waste_status s = waste_open(dir.c_str(), &o, &m);
    INFO(waste_last_error());
    REQUIRE(s == WASTE_OK);
  }
  ~Model() { waste_close(m); }
};

std::vector<int32_t> prompt_for(waste_model* m, const waste_tool* tools, size_t n) {
  const waste_chat_message user{WASTE_ROLE_USER, "Weather in Paris?"};
  int32_t* ids = nullptr;
  size_t count = 0;
  REQUIRE(waste_chat_apply_tools(m, nullptr, &user, 1, tools, n, 1, nullptr, nullptr, &ids, &count) == WASTE_OK);
  std::vector<int32_t> out(ids, ids + count);
  waste_free(ids);
  return out;
}

json parsed_calls(waste_model* m, const std::string& text) {
  char* content = nullptr;
  char* calls = nullptr;
  REQUIRE(waste_parse_tool_calls(m, nullptr, text.data(), text.size(), &content, &calls) == WASTE_OK);
  CHECK(std::string(content).empty());
  const json out = json::parse(calls);
  waste_free(content);
  waste_free(calls);
  return out;
}

}  // namespace

TEST_CASE("waste_generate_tool_call on tiny-glm writes a named call in GLM's markup, exact bytes, read back",
          "[capi][tools][glm]") {
  for (const bool specials : {false, true}) {
    INFO("markers as special tokens: " << specials);
    Model h(glm_container(specials));
    const waste_tool tools[1] = {
        {"get_weather", nullptr,
         R"({"type":"object","required":["unit","days"],"properties":{"unit":{"enum":["celsius"]},"days":{"const":3},"note":{"type":"string"}}})"}};
    const std::vector<int32_t> prompt = prompt_for(h.m, tools, 1);
    waste_generate_params p;
    waste_generate_params_init(&p);
    p.max_tokens = 200;
    p.temperature = 1.0f;
    p.seed = 5;
    Seen call;
    waste_generate_result r;
    waste_generate_result_init(&r);
    const waste_status st = waste_generate_tool_call(h.m, nullptr, prompt.data(), prompt.size(), &p, tools, 1,
                                                     "get_weather", 0, seen, &call, &r);
    INFO(waste_last_error());
    REQUIRE(st == WASTE_OK);
    CHECK(r.stop_reason == WASTE_STOP_STOP_TOKEN);
    CHECK(call.text ==
          "<tool_call>get_weather<arg_key>unit</arg_key><arg_value>celsius</arg_value><arg_key>days</arg_key>"
          "<arg_value>3</arg_value></tool_call>");
    // With the specials, each marker is one token: 2 + 4 per argument.
    int32_t* ids = nullptr;
    size_t n = 0;
    REQUIRE(waste_tokenize(h.m, "</arg_value>", 12, WASTE_TOKENIZE_MARKUP, &ids, &n) == WASTE_OK);
    const std::vector<int32_t> close(ids, ids + n);
    waste_free(ids);
    CHECK((close.size() == 1) == specials);
    if (specials) CHECK(std::count(call.tokens.begin(), call.tokens.end(), close[0]) == 2);
    CHECK(parsed_calls(h.m, call.text) ==
          json::array({{{"arguments", R"({"unit":"celsius","days":3})"}, {"id", "call_0"}, {"name", "get_weather"}}}));
  }
}

TEST_CASE("waste_generate_tool_call on tiny-glm with required picks one of three tools, arguments valid",
          "[capi][tools][glm]") {
  const waste_tool tools[3] = {
      {"get_weather", nullptr,
       R"({"type":"object","required":["unit"],"properties":{"unit":{"enum":["celsius","fahrenheit"]}}})"},
      {"get_time", nullptr,
       R"({"type":"object","required":["zone","utc"],"properties":{"zone":{"type":"integer","minimum":-12,"maximum":14},"utc":{"type":"boolean"}}})"},
      {"ping", nullptr, R"({"type":"object","properties":{}})"}};
  for (const bool specials : {false, true}) {
    Model h(glm_container(specials));
    const std::vector<int32_t> prompt = prompt_for(h.m, tools, 3);
    for (const int seed : {1, 2, 3, 4}) {
      INFO("specials " << specials << " seed " << seed);
      waste_generate_params p;
      waste_generate_params_init(&p);
      p.max_tokens = 200;
      p.temperature = 1.0f;
      p.seed = std::uint64_t(seed);
      Seen call;
      REQUIRE(waste_reset(h.m) == WASTE_OK);
      const waste_status st = waste_generate_tool_call(h.m, nullptr, prompt.data(), prompt.size(), &p, tools, 3,
                                                       nullptr, 0, seen, &call, nullptr);
      INFO(waste_last_error());
      REQUIRE(st == WASTE_OK);
      INFO(call.text);
      REQUIRE(call.text.starts_with("<tool_call>"));
      REQUIRE(call.text.ends_with("</tool_call>"));
      const json calls = parsed_calls(h.m, call.text);
      REQUIRE(calls.size() == 1);
      const std::string name = calls[0]["name"];
      const json args = json::parse(calls[0]["arguments"].get<std::string>());
      if (name == "get_weather") {
        CHECK(args.size() == 1);
        CHECK((args["unit"] == "celsius" || args["unit"] == "fahrenheit"));
      } else if (name == "get_time") {
        CHECK(args.size() == 2);
        REQUIRE(args["zone"].is_number_integer());
        CHECK(args["zone"].get<int>() >= -12);
        CHECK(args["zone"].get<int>() <= 14);
        CHECK(args["utc"].is_boolean());
      } else {
        CHECK(name == "ping");
        CHECK(args == json::object());
      }
    }
  }
}

}  // namespace waste
