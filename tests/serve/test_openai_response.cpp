// Response bodies and SSE framing, byte for byte: what openai-node and openai-python parse.
#include <catch2/catch.hpp>

#include "cli/serve/metrics.hpp"
#include "cli/serve/openai_response.hpp"

namespace waste::serve {

TEST_CASE("Error objects carry all four keys, null when empty", "[serve][response]") {
  CHECK(dump(error_json(bad_param("top_p", "'top_p' must be a number"))) ==
        R"({"error":{"code":null,"message":"'top_p' must be a number","param":"top_p","type":"invalid_request_error"}})");
  CHECK(dump(error_json(ApiError{429, "busy", "rate_limit_error", "", "rate_limit_exceeded"})) ==
        R"({"error":{"code":"rate_limit_exceeded","message":"busy","param":null,"type":"rate_limit_error"}})");
}

TEST_CASE("SSE events are one data line and a blank line, DONE ends the stream", "[serve][response][sse]") {
  const ResponseIds ids{"chatcmpl-1", 1700000000, "tiny"};
  CHECK(sse_event(chat_chunk_json(ids, {{"role", "assistant"}, {"content", ""}}, nullptr, false)) ==
        "data: {\"choices\":[{\"delta\":{\"content\":\"\",\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0,"
        "\"logprobs\":null}],\"created\":1700000000,\"id\":\"chatcmpl-1\",\"model\":\"tiny\","
        "\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"waste\"}\n\n");
  CHECK(std::string(kSseDone) == "data: [DONE]\n\n");
  // A newline in the content stays escaped inside the one data line.
  const std::string event = sse_event(chat_chunk_json(ids, {{"content", "a\nb"}}, nullptr, true));
  CHECK(event.find('\n') == event.size() - 2);
  CHECK(event.find(R"("content":"a\nb")") != std::string::npos);
  CHECK(event.find(R"("usage":null)") != std::string::npos);
  // Hazard: a token that ends inside a UTF-8 character must not throw while dumping.
  CHECK(sse_event(completion_chunk_json(ids, "\xE6\x88", nullptr, false)).find("\xEF\xBF\xBD") != std::string::npos);
}

TEST_CASE("The finish chunk, the usage chunk and blocking answers", "[serve][response]") {
  const ResponseIds ids{"chatcmpl-2", 5, "m"};
  const auto finish = chat_chunk_json(ids, nlohmann::json::object(), finish_json(Finish::length), true);
  CHECK(finish["choices"][0]["finish_reason"] == "length");
  CHECK(finish["choices"][0]["delta"] == nlohmann::json::object());
  const auto usage = usage_chunk_json(ids, Endpoint::chat, 7, 3);
  CHECK(dump(usage) ==
        R"({"choices":[],"created":5,"id":"chatcmpl-2","model":"m","object":"chat.completion.chunk",)"
        R"("system_fingerprint":"waste","usage":{"completion_tokens":3,"prompt_tokens":7,"total_tokens":10}})");
  const auto chat = chat_completion_json(ids, "Hi", Finish::stop, 7, 2, nullptr);
  CHECK(dump(chat["choices"]) ==
        R"([{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"Hi","refusal":null,"role":"assistant"}}])");
  CHECK(chat["usage"]["total_tokens"] == 9);
  CHECK(finish_json(Finish::cancelled).is_null());

  TokenLogprob t{5, "ab", -0.5f, {{5, -0.5f}, {9, -1.25f}}, {"ab", "c"}};
  CHECK(dump(chat_logprobs_json({t})) ==
        R"({"content":[{"bytes":[97,98],"logprob":-0.5,"token":"ab","top_logprobs":[{"bytes":[97,98],"logprob":-0.5,"token":"ab"},)"
        R"({"bytes":[99],"logprob":-1.25,"token":"c"}]}],"refusal":null})");
  CHECK(dump(completion_logprobs_json({t, t})) ==
        R"({"text_offset":[0,2],"token_logprobs":[-0.5,-0.5],"tokens":["ab","ab"],"top_logprobs":[{"ab":-0.5,"c":-1.25},{"ab":-0.5,"c":-1.25}]})");
  CHECK(dump(models_json("tiny", 3)) == R"({"data":[{"created":3,"id":"tiny","object":"model","owned_by":"waste"}],"object":"list"})");
}

TEST_CASE("Metrics render requests by route and status in Prometheus text", "[serve][metrics]") {
  Metrics metrics;
  metrics.count_request("/v1/completions", 200);
  metrics.count_request("/v1/completions", 200);
  metrics.count_request("/v1/completions", 400);
  CHECK(metrics.requests("/v1/completions", 200) == 2);
  CHECK(metrics.requests("/health", 200) == 0);
  CHECK(metrics.render(nullptr) ==
        "# HELP waste_requests_total HTTP requests answered, by route and status.\n"
        "# TYPE waste_requests_total counter\n"
        "waste_requests_total{route=\"/v1/completions\",status=\"200\"} 2\n"
        "waste_requests_total{route=\"/v1/completions\",status=\"400\"} 1\n");
}

}  // namespace waste::serve

namespace waste::serve {

TEST_CASE("A chat answer of a thinking format carries reasoning_content, others do not", "[serve][response]") {
  const ResponseIds ids{"chatcmpl-x", 5, "m"};
  const auto with = chat_completion_json(ids, "It is 4.", Finish::stop, 7, 9, nullptr, {}, std::string("2+2"));
  CHECK(with["choices"][0]["message"] == nlohmann::json{{"role", "assistant"}, {"content", "It is 4."}, {"refusal", nullptr},
                                                        {"reasoning_content", "2+2"}});
  const auto empty = chat_completion_json(ids, "x", Finish::stop, 7, 1, nullptr, {}, std::string());
  CHECK(empty["choices"][0]["message"]["reasoning_content"] == "");
  const auto without = chat_completion_json(ids, "x", Finish::stop, 7, 1, nullptr);
  CHECK_FALSE(without["choices"][0]["message"].contains("reasoning_content"));
}

}  // namespace waste::serve
