// Request parsing and validation: typed values from valid bodies, and for invalid ones a 400
// whose message and param name the field (a client mistake must never become a 5xx, and an
// unsupported feature must never be silently ignored).
#include <catch2/catch.hpp>

#include "cli/serve/openai_request.hpp"

namespace waste::serve {
namespace {

ApiError chat_error(std::string_view body) {
  auto r = parse_request(Endpoint::chat, body);
  REQUIRE_FALSE(r);
  return r.error();
}

ApiError completion_error(std::string_view body) {
  auto r = parse_request(Endpoint::completion, body);
  REQUIRE_FALSE(r);
  return r.error();
}

}  // namespace

TEST_CASE("A chat body becomes a typed request", "[serve][request]") {
  auto r = parse_request(Endpoint::chat, R"({"model": "tiny", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "developer", "content": [{"type": "text", "text": "Dev "}, {"type": "text", "text": "note"}]},
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": null},
      {"role": "tool", "tool_call_id": "functions.f:0", "content": "42"}],
    "temperature": 0.5, "top_p": 0.9, "top_k": 7, "seed": -3, "max_tokens": 9, "max_completion_tokens": 11,
    "stop": ["\n\n", "END"], "presence_penalty": 0.25, "frequency_penalty": -1.5, "n": 1,
    "stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 20,
    "response_format": {"type": "text"}, "user": "ignored", "tools": []})");
  INFO((r ? "" : r.error().message));
  REQUIRE(r);
  REQUIRE(r->messages.size() == 5);
  CHECK(r->messages[0].role == ChatRole::system);
  CHECK(r->messages[1].role == ChatRole::system);
  CHECK(r->messages[1].content == "Dev note");
  CHECK(r->messages[2].role == ChatRole::user);
  CHECK(r->messages[3].role == ChatRole::assistant);
  CHECK(r->messages[3].content.empty());
  CHECK(r->messages[4].role == ChatRole::tool);
  CHECK(r->messages[4].tool_call_id == "functions.f:0");
  CHECK(r->messages[4].content == "42");
  CHECK(r->sampling.temperature == 0.5f);
  CHECK(r->sampling.top_p == 0.9f);
  CHECK(r->sampling.top_k == 7);
  CHECK(r->sampling.seed == std::uint64_t(-3));
  CHECK(r->sampling.presence_penalty == 0.25f);
  CHECK(r->sampling.frequency_penalty == -1.5f);
  CHECK(r->max_tokens == 11);  // max_completion_tokens wins over the deprecated max_tokens
  CHECK(r->stop == std::vector<std::string>{"\n\n", "END"});
  CHECK(r->stream);
  CHECK(r->include_usage);
  CHECK(r->logprobs);
  CHECK(r->top_logprobs == 20);
}

TEST_CASE("OpenAI defaults apply and null means absent", "[serve][request]") {
  auto r = parse_request(Endpoint::chat,
                         R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": null,
                             "stop": null, "seed": null, "max_tokens": null})");
  REQUIRE(r);
  CHECK(r->sampling.temperature == 1.0f);
  CHECK(r->sampling.top_p == 1.0f);
  CHECK(r->sampling.top_k == 0);
  CHECK(r->sampling.seed == 0);
  CHECK_FALSE(r->max_tokens);
  CHECK(r->stop.empty());
  CHECK_FALSE(r->stream);
  CHECK_FALSE(r->logprobs);
}

TEST_CASE("Invalid chat bodies get a 400 naming the parameter", "[serve][request]") {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  auto with = [&](const std::string& extra) { return R"({"model": "m", )" + msgs + ", " + extra + "}"; };

  ApiError e = chat_error("{\"model\": ");
  CHECK(e.status == 400);
  CHECK(e.param.empty());
  CHECK(e.message.rfind("request body is not valid JSON: ", 0) == 0);

  e = chat_error("[1, 2]");
  CHECK(e.message == "request body must be a JSON object");

  // Hazard (found by fuzz_openai_request): a number beyond double's range is valid JSON syntax but
  // makes the parser throw out_of_range, not parse_error; it must be a 400, not a dead server.
  e = chat_error(R"({"model": "m", "messages": [], "temperature": 1e999})");
  CHECK(e.status == 400);
  CHECK(e.message == "request body is not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e999'");

  // Hazard: invalid UTF-8 inside a string must be refused at the parser, not reach the tokenizer.
  e = chat_error("{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}");
  CHECK(e.status == 400);
  CHECK(e.message.rfind("request body is not valid JSON: ", 0) == 0);

  e = chat_error(R"({"messages": []})");
  CHECK(e.param == "model");
  CHECK(e.message == "'model' is required");
  e = chat_error(R"({"model": 5, "messages": []})");
  CHECK(e.message == "'model' must be a string");
  e = chat_error(R"({"model": "m"})");
  CHECK(e.param == "messages");
  CHECK(e.message == "'messages' is required");
  e = chat_error(R"({"model": "m", "messages": []})");
  CHECK(e.message == "'messages' must hold at least one message");
  e = chat_error(R"({"model": "m", "messages": [{"role": "wizard", "content": "x"}]})");
  CHECK(e.param == "messages[0].role");
  CHECK(e.message == "'messages[0].role' \"wizard\" is not one of system, developer, user, assistant, tool");
  e = chat_error(R"({"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "user"}]})");
  CHECK(e.param == "messages[1].content");
  CHECK(e.message == "'messages[1].content' is required");
  e = chat_error(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]})");
  CHECK(e.param == "messages[0].content[0].type");
  CHECK(e.message == "'messages[0].content[0].type' \"input_audio\" is not supported (text and image_url parts only)");
  e = chat_error(R"({"model": "m", "messages": [{"role": "tool", "content": "a"}]})");
  CHECK(e.param == "messages[0].tool_call_id");
  e = chat_error(R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{}]}]})");
  CHECK(e.param == "messages[0].tool_calls[0].id");
  CHECK(e.message == "'messages[0].tool_calls[0].id' must be a string");

  e = chat_error(with(R"("n": 2)"));
  CHECK(e.param == "n");
  CHECK(e.message == "'n' must be 1 (one choice per request)");
  e = chat_error(with(R"("temperature": 2.5)"));
  CHECK(e.param == "temperature");
  CHECK(e.message == "'temperature' must be between 0.0 and 2.0");
  e = chat_error(with(R"("temperature": "hot")"));
  CHECK(e.message == "'temperature' must be a number");
  e = chat_error(with(R"("top_p": -0.1)"));
  CHECK(e.param == "top_p");
  e = chat_error(with(R"("max_tokens": -1)"));
  CHECK(e.param == "max_tokens");
  CHECK(e.message == "'max_tokens' must be between 0 and 2147483647");
  e = chat_error(with(R"("max_completion_tokens": 1e300)"));
  CHECK(e.message == "'max_completion_tokens' must be an integer");
  e = chat_error(with(R"("max_tokens": 99999999999999999999)"));
  CHECK(e.param == "max_tokens");
  e = chat_error(with(R"("seed": 1.5)"));
  CHECK(e.message == "'seed' must be an integer");
  e = chat_error(with(R"("presence_penalty": 3)"));
  CHECK(e.message == "'presence_penalty' must be between -2.0 and 2.0");
  e = chat_error(with(R"("stop": ["a", "b", "c", "d", "e"])"));
  CHECK(e.param == "stop");
  CHECK(e.message == "'stop' holds at most 4 sequences");
  e = chat_error(with(R"("stop": [1])"));
  CHECK(e.message == "'stop' must be a string or an array of strings");
  e = chat_error(with(R"("stop": "")"));
  CHECK(e.message == "'stop' sequences must not be empty");
  e = chat_error(with(R"("stream": "yes")"));
  CHECK(e.message == "'stream' must be a boolean");
  e = chat_error(with(R"("stream_options": {"include_usage": true})"));
  CHECK(e.message == "'stream_options' is only allowed with 'stream': true");
  e = chat_error(with(R"("top_logprobs": 3)"));
  CHECK(e.message == "'top_logprobs' requires 'logprobs': true");
  e = chat_error(with(R"("logprobs": true, "top_logprobs": 21)"));
  CHECK(e.message == "'top_logprobs' must be between 0 and 20");
  // Hazard: a structured-output or tool request silently answered as free text (test_tools.cpp has the rest).
  e = chat_error(with(R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "always")"));
  CHECK(e.param == "tool_choice");
  e = chat_error(with(R"("response_format": {"type": "json"})"));
  CHECK(e.param == "response_format.type");
}

TEST_CASE("logit_bias: token ids to biases in id order, bad keys and values named", "[serve][request]") {
  auto r = parse_request(Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                             "logit_bias": {"17": -100, "5": 2.5}})");
  REQUIRE(r);
  REQUIRE(r->logit_bias.size() == 2);
  CHECK(r->logit_bias[0] == std::pair<int, float>(5, 2.5f));
  CHECK(r->logit_bias[1] == std::pair<int, float>(17, -100.0f));
  const auto error_of = [](std::string_view bias) {
    auto p = parse_request(Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": )" +
                                               std::string(bias) + "}");
    REQUIRE_FALSE(p);
    CHECK(p.error().param == "logit_bias");
    return p.error().message;
  };
  CHECK(error_of("[1]") == "'logit_bias' must be an object of token id: bias");
  CHECK(error_of(R"({"x": 1})") == "'logit_bias' keys must be token ids; got 'x'");
  CHECK(error_of(R"({"-3": 1})") == "'logit_bias' keys must be token ids; got '-3'");
  CHECK(error_of(R"({"3 ": 1})") == "'logit_bias' keys must be token ids; got '3 '");
  CHECK(error_of(R"({"3": 101})") == "'logit_bias' values must be numbers between -100 and 100 (token 3)");
  CHECK(error_of(R"({"3": "1"})") == "'logit_bias' values must be numbers between -100 and 100 (token 3)");
}

TEST_CASE("Completion prompts: text, token ids, one-element arrays, refused options", "[serve][request]") {
  auto r = parse_request(Endpoint::completion, R"({"model": "m", "prompt": "Once"})");
  REQUIRE(r);
  CHECK(r->prompt_text == "Once");
  CHECK_FALSE(r->prompt_is_ids);
  CHECK(r->max_tokens == 16);  // the endpoint's default
  r = parse_request(Endpoint::completion, R"({"model": "m", "prompt": ["Twice"], "logprobs": 2, "max_tokens": 3})");
  REQUIRE(r);
  CHECK(r->prompt_text == "Twice");
  CHECK(r->logprobs);
  CHECK(r->top_logprobs == 2);
  CHECK(r->max_tokens == 3);
  r = parse_request(Endpoint::completion, R"({"model": "m", "prompt": [[1, 2, 3]]})");
  REQUIRE(r);
  CHECK(r->prompt_is_ids);
  CHECK(r->prompt_ids == std::vector<int>{1, 2, 3});

  ApiError e = completion_error(R"({"model": "m"})");
  CHECK(e.message == "'prompt' is required");
  e = completion_error(R"({"model": "m", "prompt": ["a", "b"]})");
  CHECK(e.param == "prompt");
  CHECK(e.message == "'prompt' must be a string, an array of one string, or an array of token ids");
  e = completion_error(R"({"model": "m", "prompt": [1, -2]})");
  CHECK(e.message == "'prompt' token id -2 is out of range");
  e = completion_error(R"({"model": "m", "prompt": "a", "logprobs": 6})");
  CHECK(e.message == "'logprobs' must be between 0 and 5");
  e = completion_error(R"({"model": "m", "prompt": "a", "echo": true})");
  CHECK(e.message == "'echo' is not supported");
  e = completion_error(R"({"model": "m", "prompt": "a", "suffix": "z"})");
  CHECK(e.param == "suffix");
}

}  // namespace waste::serve

namespace waste::serve {

TEST_CASE("reasoning_effort and past reasoning_content are read, bad shapes refused exactly", "[serve][request]") {
  auto r = parse_request(Endpoint::chat, R"({"model": "m", "reasoning_effort": "high", "messages": [
      {"role": "user", "content": "Q"},
      {"role": "assistant", "content": "A", "reasoning_content": "because"},
      {"role": "assistant", "content": "B", "reasoning_content": null}]})");
  REQUIRE(r);
  CHECK(r->reasoning_effort == "high");
  CHECK_FALSE(r->reasoning_effort_numeric);
  CHECK(r->messages[1].reasoning == "because");
  CHECK(r->messages[2].reasoning.empty());
  auto n = parse_request(Endpoint::chat, R"({"model": "m", "reasoning_effort": 40, "messages": [{"role": "user", "content": "Q"}]})");
  REQUIRE(n);
  CHECK(n->reasoning_effort == "40");
  CHECK(n->reasoning_effort_numeric);
  auto none = parse_request(Endpoint::chat, R"({"model": "m", "messages": [{"role": "user", "content": "Q"}]})");
  REQUIRE(none);
  CHECK(none->reasoning_effort.empty());

  const std::string shape = "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max, or a whole number";
  for (const char* bad : {R"("extreme")", "1.5", "true", R"(["high"])"}) {
    INFO(bad);
    const ApiError e = chat_error(std::string(R"({"model": "m", "messages": [{"role": "user", "content": "Q"}], "reasoning_effort": )") +
                                  bad + "}");
    CHECK(e.status == 400);
    CHECK(e.param == "reasoning_effort");
    CHECK(e.message == shape);
  }
  const ApiError e = chat_error(R"({"model": "m", "messages": [{"role": "assistant", "content": "A", "reasoning_content": 5}]})");
  CHECK(e.param == "messages[0].reasoning_content");
  CHECK(e.message == "'messages[0].reasoning_content' must be a string");
}

}  // namespace waste::serve
