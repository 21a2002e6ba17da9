// Forced tool calls in DeepSeek-V4.1's DSML markup through the C API (waste_generate_tool_call)
// on a tiny synthetic container with configs/chat/deepseek-v4.1.json: once with the synthetic
// tokenizer, where the DSML markers are plain text, once with specials.json giving the markers
// (the parameter close among them) special ids. A named call whose values the schema fixes comes
// out as exact bytes; "required" among three tools gives one call whose arguments satisfy the
// chosen tool's schema; both read back through waste_parse_tool_calls.
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

const std::string kClose = "</｜DSML｜ parameter>";

// `waste synth --preset tiny --tokenizer --chat-format configs/chat/deepseek-v4.1.json`; with
// `specials`, the synthetic specials after [BOS] and [EOS] renamed to DSML's markers.
const fs::path& dsml_container(bool specials) {
  static test::ScratchDir dirs[2];
  static fs::path models[2];
  fs::path& model = models[specials ? 1 : 0];
  if (model.empty()) {
    const fs::path out = dirs[specials ? 1 : 0].path() / "tiny-dsml.waste";
    const test::Ran ran = test::run_waste({"synth", "--preset", "tiny", "--tokenizer", "--chat-format",
                                           std::string(WASTE_SOURCE_DIR) + "/configs/chat/deepseek-v4.1.json",
                                           "--out", out.string()});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    if (specials) {
      const json before = json::parse(test::slurp(out / "specials.json"));
      const std::vector<std::string> texts = {"<｜DSML｜ calls>", "</｜DSML｜ calls>", "<｜DSML｜ invoke",
                                              "</｜DSML｜ invoke>", kClose, "<｜User｜>", "<｜Assistant｜>"};
      REQUIRE(before.size() >= texts.size() + 2);
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
    o.ctx_tokens = 2048;
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

TEST_CASE("waste_generate_tool_call with DSML markup writes a named call, exact bytes, read back",
          "[capi][tools][dsml]") {
  for (const bool specials : {false, true}) {
    INFO("markers as special tokens: " << specials);
    Model h(dsml_container(specials));
    const waste_tool tools[1] = {
        {"get_weather", nullptr,
         R"({"type":"object","required":["unit","days"],"properties":{"unit":{"enum":["celsius"]},"days":{"const":3},"note":{"type":"string"}}})"}};
    const std::vector<int32_t> prompt = prompt_for(h.m, tools, 1);
    waste_generate_params p;
    waste_generate_params_init(&p);
    p.max_tokens = 300;
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
          "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n"
          "<｜DSML｜ parameter name=\"unit\" string=\"true\">celsius" + kClose + "\n"
          "<｜DSML｜ parameter name=\"days\" string=\"false\">3" + kClose + "\n"
          "</｜DSML｜ invoke>\n</｜DSML｜ calls>");
    // With the specials, the parameter close is one token, once per argument.
    int32_t* ids = nullptr;
    size_t n = 0;
    REQUIRE(waste_tokenize(h.m, kClose.data(), kClose.size(), WASTE_TOKENIZE_MARKUP, &ids, &n) == WASTE_OK);
    const std::vector<int32_t> close(ids, ids + n);
    waste_free(ids);
    CHECK((close.size() == 1) == specials);
    if (specials) CHECK(std::count(call.tokens.begin(), call.tokens.end(), close[0]) == 2);
    CHECK(parsed_calls(h.m, call.text) ==
          json::array({{{"arguments", R"({"unit":"celsius","days":3})"}, {"id", "call_0"}, {"name", "get_weather"}}}));
  }
}

TEST_CASE("waste_generate_tool_call with DSML markup and required picks one of three tools, arguments valid",
          "[capi][tools][dsml]") {
  const waste_tool tools[3] = {
      {"get_weather", nullptr,
       R"({"type":"object","required":["unit","city"],"properties":{"unit":{"enum":["celsius","fahrenheit"]},"city":{"type":"string","maxLength":4}}})"},
      {"get_time", nullptr,
       R"({"type":"object","required":["zone","utc"],"properties":{"zone":{"type":"integer","minimum":-12,"maximum":14},"utc":{"type":"boolean"}}})"},
      {"ping", nullptr, R"({"type":"object","properties":{}})"}};
  for (const bool specials : {false, true}) {
    Model h(dsml_container(specials));
    const std::vector<int32_t> prompt = prompt_for(h.m, tools, 3);
    for (const int seed : {1, 2, 3, 4}) {
      INFO("specials " << specials << " seed " << seed);
      waste_generate_params p;
      waste_generate_params_init(&p);
      p.max_tokens = 300;
      p.temperature = 1.0f;
      p.seed = std::uint64_t(seed);
      Seen call;
      REQUIRE(waste_reset(h.m) == WASTE_OK);
      const waste_status st = waste_generate_tool_call(h.m, nullptr, prompt.data(), prompt.size(), &p, tools, 3,
                                                       nullptr, 0, seen, &call, nullptr);
      INFO(waste_last_error());
      REQUIRE(st == WASTE_OK);
      INFO(call.text);
      REQUIRE(call.text.starts_with("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\""));
      REQUIRE(call.text.ends_with("\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));
      const json calls = parsed_calls(h.m, call.text);
      REQUIRE(calls.size() == 1);
      const std::string name = calls[0]["name"];
      const json args = json::parse(calls[0]["arguments"].get<std::string>());
      if (name == "get_weather") {
        CHECK(args.size() == 2);
        CHECK((args["unit"] == "celsius" || args["unit"] == "fahrenheit"));
        REQUIRE(args["city"].is_string());  // string="false": a JSON string, at most 4 characters
        const std::string city = args["city"];
        CHECK(std::count_if(city.begin(), city.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }) <= 4);
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
