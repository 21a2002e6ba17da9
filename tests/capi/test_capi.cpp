// The C API (compute/capi/waste.h) through libwaste.so, on a tiny synthetic container with a
// tokenizer: generation equals the C++ engine's, cancellation stops where asked, errors name
// what failed, tokens round-trip, the chat prompt is the CLI's, eval scores as `waste eval`,
// sessions restore, two handles share one daemon; output under a grammar or JSON Schema equals
// `waste run --grammar/--json-schema`, tools are declared as serve declares them and tool calls read back.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "../cli/cli_test_support.hpp"
#include "compute/api/engine.hpp"
#include "compute/capi/waste.h"
#include "compute/prompt/chat_format.hpp"
#include "compute/tokenizer/tokenizer.hpp"

namespace waste {
namespace {

namespace fs = std::filesystem;

// Every id the callback saw, and when to stop.
struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  int stop_after = -1;       // callback returns nonzero after this many tokens
  waste_model* cancel_model = nullptr;
  int cancel_after = -1;     // another thread calls waste_cancel after this many tokens
};

int collect(void* user, int32_t token, const char* piece, size_t len) {
  auto* c = static_cast<Collected*>(user);
  c->tokens.push_back(token);
  c->text.append(piece, len);
  if (c->cancel_model != nullptr && int(c->tokens.size()) == c->cancel_after) {
    std::thread([m = c->cancel_model] { waste_cancel(m); }).join();
  }
  return c->stop_after >= 0 && int(c->tokens.size()) >= c->stop_after ? 1 : 0;
}

// The container (tokenizer + the kimi-k3 chat.json), made once by `waste synth`.
const fs::path& model_dir() {
  static const fs::path dir = [] {
    const fs::path& m = test::tokenizer_container();
    fs::copy_file(fs::path(WASTE_SOURCE_DIR) / "configs/chat/kimi-k3.json", m / "chat.json",
                  fs::copy_options::overwrite_existing);
    return m;
  }();
  return dir;
}

struct Handle {
  waste_model* m = nullptr;
  ~Handle() { waste_close(m); }
};

void open_in_process(Handle& h, int ctx = 64) {
  waste_open_options o;
  waste_open_options_init(&o);
  o.mode = WASTE_OPEN_IN_PROCESS;
  o.ctx_tokens = ctx;
  o.threads = 1;
  const waste_status s = waste_open(model_dir().c_str(), &o, &h.m);
  INFO(waste_last_error());
  REQUIRE(s == WASTE_OK);
  REQUIRE(h.m != nullptr);
}

const std::vector<int32_t> kPrompt = {1, 17, 42, 99};

std::vector<int> cxx_greedy(int n) {
  EngineOptions options;
  options.model = model_dir();
  options.threads = 1;
  options.ctx_tokens = 64;
  auto engine = Engine::open(options);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  GenerateParams params;
  params.max_tokens = n;
  params.eos_token = -2;
  const std::vector<int> prompt(kPrompt.begin(), kPrompt.end());
  auto result = (*engine)->generate(prompt, params);
  REQUIRE(result);
  return result->tokens;
}

waste_generate_params greedy(int n) {
  waste_generate_params p;
  waste_generate_params_init(&p);
  p.max_tokens = n;
  p.ignore_eos = 1;
  return p;
}

// A private runtime dir and this build's daemon, so nothing else running is attached to.
struct PrivateDaemonEnv {
  test::ScratchDir dir;
  PrivateDaemonEnv() {
    ::setenv("WASTE_RUNTIME_DIR", dir.path().c_str(), 1);
    ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
    ::setenv("WASTE_LINGER_MS", "0", 1);
  }
  ~PrivateDaemonEnv() {
    ::unsetenv("WASTE_RUNTIME_DIR");
    ::unsetenv("WASTE_IOSERVER");
    ::unsetenv("WASTE_LINGER_MS");
  }
};

}  // namespace

TEST_CASE("waste_generate (in-process) gives the C++ engine's greedy tokens, each with its piece", "[capi]") {
  Handle h;
  open_in_process(h);
  Collected c;
  waste_generate_params p = greedy(10);
  waste_generate_result r;
  waste_generate_result_init(&r);
  REQUIRE(waste_generate(h.m, kPrompt.data(), kPrompt.size(), &p, collect, &c, &r) == WASTE_OK);
  const std::vector<int> want = cxx_greedy(10);
  CHECK(std::vector<int>(c.tokens.begin(), c.tokens.end()) == want);
  CHECK(r.n_tokens == 10);
  CHECK(r.stop_reason == WASTE_STOP_MAX_TOKENS);
  CHECK(r.prompt_tokens == 4);
  char* text = nullptr;
  size_t len = 0;
  REQUIRE(waste_detokenize(h.m, c.tokens.data(), c.tokens.size(), &text, &len) == WASTE_OK);
  CHECK(std::string(text, len) == c.text);
  waste_free(text);

  waste_stats st;
  waste_stats_init(&st);
  REQUIRE(waste_get_stats(h.m, &st) == WASTE_OK);
  CHECK(st.experts_hit + st.experts_missed > 0);
  CHECK(st.last_tokens == 10);
  waste_model_info info;
  waste_model_info_init(&info);
  REQUIRE(waste_get_model_info(h.m, &info) == WASTE_OK);
  CHECK(info.position == 14);
  CHECK(info.ctx_tokens == 64);
  CHECK(info.has_tokenizer == 1);
  CHECK(info.has_chat_format == 1);
  CHECK(info.daemon_pid == 0);
  CHECK(std::string(info.expert_format) == "VQ3R");
}

TEST_CASE("waste_generate stops when the callback returns nonzero and at waste_cancel from another thread", "[capi]") {
  Handle h;
  open_in_process(h);
  const std::vector<int> want = cxx_greedy(10);
  SECTION("callback") {
    Collected c;
    c.stop_after = 3;
    waste_generate_params p = greedy(10);
    waste_generate_result r;
    waste_generate_result_init(&r);
    REQUIRE(waste_generate(h.m, kPrompt.data(), kPrompt.size(), &p, collect, &c, &r) == WASTE_OK);
    CHECK(r.stop_reason == WASTE_STOP_CANCELLED);
    CHECK(r.n_tokens == 3);
    CHECK(std::vector<int>(c.tokens.begin(), c.tokens.end()) == std::vector<int>(want.begin(), want.begin() + 3));
  }
  SECTION("waste_cancel") {
    Collected c;
    c.cancel_model = h.m;
    c.cancel_after = 5;
    waste_generate_params p = greedy(10);
    waste_generate_result r;
    waste_generate_result_init(&r);
    REQUIRE(waste_generate(h.m, kPrompt.data(), kPrompt.size(), &p, collect, &c, &r) == WASTE_OK);
    CHECK(r.stop_reason == WASTE_STOP_CANCELLED);
    CHECK(r.n_tokens == 5);
    // The cancel was consumed: the next generation runs to max_tokens.
    REQUIRE(waste_reset(h.m) == WASTE_OK);
    Collected again;
    REQUIRE(waste_generate(h.m, kPrompt.data(), kPrompt.size(), &p, collect, &again, &r) == WASTE_OK);
    CHECK(r.stop_reason == WASTE_STOP_MAX_TOKENS);
    CHECK(std::vector<int>(again.tokens.begin(), again.tokens.end()) == want);
  }
  SECTION("a cancel before generation stops it after the first token") {
    waste_cancel(h.m);
    Collected c;
    waste_generate_params p = greedy(10);
    waste_generate_result r;
    waste_generate_result_init(&r);
    REQUIRE(waste_generate(h.m, kPrompt.data(), kPrompt.size(), &p, collect, &c, &r) == WASTE_OK);
    CHECK(r.stop_reason == WASTE_STOP_CANCELLED);
    CHECK(r.n_tokens == 1);
  }
}

TEST_CASE("C API errors name what failed: a missing container, a bad option, a bad id, a NULL pointer", "[capi]") {
  waste_model* m = nullptr;
  waste_open_options o;
  waste_open_options_init(&o);
  o.mode = WASTE_OPEN_IN_PROCESS;
  const waste_status missing = waste_open("/nonexistent/none.waste", &o, &m);
  CHECK(m == nullptr);
  CHECK(std::string(waste_status_name(missing)) == "format");
  CHECK(std::string(waste_last_error()) ==
        "/nonexistent/none.waste does not exist (a model is a NAME.waste directory: make one with `waste synth` or "
        "`waste convert`)");

  o.ctx_tokens = 0;
  CHECK(waste_open(model_dir().c_str(), &o, &m) == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) == "waste_open: options.ctx_tokens 0 must be 1 or more");

  // Hazard: an options struct from an older header (smaller) must not be read past its end.
  waste_open_options_init(&o);
  o.struct_size = 8;
  CHECK(waste_open(model_dir().c_str(), &o, &m) == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) ==
        "waste_open: options.struct_size 8 is not sizeof(waste_open_options) (call waste_open_options_init)");

  CHECK(waste_open(model_dir().c_str(), nullptr, nullptr) == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) == "waste_open: out is NULL");

  Handle h;
  open_in_process(h);
  const int32_t bad[2] = {5, 1 << 30};
  char* text = nullptr;
  CHECK(waste_detokenize(h.m, bad, 2, &text, nullptr) == WASTE_ERR_ARGUMENT);
  CHECK(text == nullptr);
  CHECK(std::string(waste_last_error()) == "waste_detokenize: ids[1] = 1073741824 is not a token of the vocabulary");

  waste_generate_params p = greedy(4);
  CHECK(waste_generate(h.m, bad, 2, &p, nullptr, nullptr, nullptr) == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()).find("1073741824") != std::string::npos);

  waste_chat_message msg{17, "hi"};
  CHECK(waste_chat_apply(h.m, nullptr, &msg, 1, 1, &text, nullptr, nullptr, nullptr) == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) == "messages[0].role 17 is not a waste_role (0..3)");
}

TEST_CASE("waste_tokenize / waste_detokenize round-trip and match the C++ tokenizer", "[capi]") {
  Handle h;
  open_in_process(h);
  auto tok = Tokenizer::load(model_dir());
  REQUIRE(tok);
  const std::string text = "Hello, world! h\xc3\xa9llo 12345 <|im_end|>";
  int32_t* ids = nullptr;
  size_t n = 0;
  REQUIRE(waste_tokenize(h.m, text.data(), text.size(), 0, &ids, &n) == WASTE_OK);
  const std::vector<int> got(ids, ids + n);
  CHECK(got == tok->encode(text));
  char* back = nullptr;
  size_t len = 0;
  REQUIRE(waste_detokenize(h.m, ids, n, &back, &len) == WASTE_OK);
  CHECK(std::string(back, len) == text);
  CHECK(back[len] == '\0');
  waste_free(back);
  waste_free(ids);

  REQUIRE(waste_tokenize(h.m, text.data(), text.size(), WASTE_TOKENIZE_BOS | WASTE_TOKENIZE_MARKUP, &ids, &n) == WASTE_OK);
  std::vector<int> markup{tok->bos()};
  tok->encode_markup(text, markup);
  CHECK(std::vector<int>(ids, ids + n) == markup);
  waste_free(ids);
}

TEST_CASE("waste_chat_apply gives the prompt `waste run --system` builds, as text and as ids", "[capi]") {
  Handle h;
  open_in_process(h);
  auto tok = Tokenizer::load(model_dir());
  REQUIRE(tok);
  auto format = ChatFormat::load_from_container(model_dir());
  REQUIRE(format);
  REQUIRE(*format);
  const waste_chat_message msgs[2] = {{WASTE_ROLE_SYSTEM, "Be brief."}, {WASTE_ROLE_USER, "Why is the sky blue?"}};
  char* text = nullptr;
  size_t len = 0;
  int32_t* ids = nullptr;
  size_t n = 0;
  REQUIRE(waste_chat_apply(h.m, nullptr, msgs, 2, 1, &text, &len, &ids, &n) == WASTE_OK);
  CHECK(std::string(text, len) ==
        "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>Why is the sky blue?<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>");
  // cli/cmd_run.cpp run_text: build_chat_prompt over the container's tokenizer and chat.json.
  std::vector<ChatMessage> messages(2);
  messages[0].role = ChatRole::system;
  messages[0].content = "Be brief.";
  messages[1].content = "Why is the sky blue?";
  CHECK(std::vector<int>(ids, ids + n) == build_chat_prompt(*tok, **format, messages));
  waste_free(text);
  waste_free(ids);

  int32_t* stops = nullptr;
  size_t n_stops = 0;
  REQUIRE(waste_chat_stop_tokens(h.m, nullptr, &stops, &n_stops) == WASTE_OK);
  CHECK(std::vector<int>(stops, stops + n_stops) == chat_stop(*tok, **format).ids);
  waste_free(stops);

  // A bare name is an installed format (here the build tree's configs/chat, the data fallback).
  REQUIRE(waste_chat_apply(h.m, "chatml", msgs + 1, 1, 1, &text, &len, nullptr, nullptr) == WASTE_OK);
  auto chatml = ChatFormat::load(fs::path(WASTE_SOURCE_DIR) / "configs/chat/chatml.json");
  REQUIRE(chatml);
  std::string want;
  for (const auto& seg : render_chat(*chatml, std::span<const ChatMessage>(&messages[1], 1))) want += seg.text;
  CHECK(std::string(text, len) == want);
  CHECK(want.find("Why is the sky blue?") != std::string::npos);
  waste_free(text);

  CHECK(waste_chat_apply(h.m, "/nonexistent/chat.json", msgs, 2, 1, &text, &len, nullptr, nullptr) != WASTE_OK);
  CHECK(std::string(waste_last_error()).find("/nonexistent/chat.json") != std::string::npos);
}

TEST_CASE("waste_eval scores a text exactly as `waste eval --ids-file --json`", "[capi]") {
  Handle h;
  open_in_process(h);
  const std::vector<int32_t> ids = {1, 17, 42, 99, 5, 7, 8, 200, 13, 77, 300, 12};
  std::vector<double> logprobs(ids.size() - 1);
  waste_eval_result r;
  waste_eval_result_init(&r);
  REQUIRE(waste_eval(h.m, ids.data(), ids.size(), logprobs.data(), &r) == WASTE_OK);
  CHECK(r.n_scored == 11);
  double sum = 0;
  for (double lp : logprobs) sum -= lp;
  CHECK(sum / 11 == r.mean_nll);

  test::ScratchDir dir;
  test::write_text(dir.path() / "ids.txt", "1 17 42 99 5 7 8 200 13 77 300 12");
  const auto ran = test::run_waste({"eval", model_dir().string(), "--in-process", "--threads", "1", "--ctx", "64",
                                    "--ids-file", (dir.path() / "ids.txt").string(), "--json"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto doc = nlohmann::json::parse(ran.out);
  CHECK(doc["mean_nll"].get<double>() == r.mean_nll);
  CHECK(doc["perplexity"].get<double>() == r.perplexity);

  CHECK(waste_eval(h.m, ids.data(), 1, nullptr, nullptr) == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) == "waste_eval: need at least 2 tokens to score, got 1");
}

TEST_CASE("waste_session_save / load: a restored sequence continues as the uninterrupted one", "[capi]") {
  Handle h;
  open_in_process(h);
  test::ScratchDir dir;
  const std::string file = (dir.path() / "s.session").string();
  waste_generate_params p = greedy(6);
  Collected first;
  REQUIRE(waste_generate(h.m, kPrompt.data(), kPrompt.size(), &p, collect, &first, nullptr) == WASTE_OK);
  REQUIRE(waste_session_save(h.m, file.c_str()) == WASTE_OK);
  const int32_t next[1] = {first.tokens.back()};
  Collected straight;
  REQUIRE(waste_generate(h.m, next, 1, &p, collect, &straight, nullptr) == WASTE_OK);

  REQUIRE(waste_reset(h.m) == WASTE_OK);
  REQUIRE(waste_session_load(h.m, file.c_str()) == WASTE_OK);
  Collected restored;
  REQUIRE(waste_generate(h.m, next, 1, &p, collect, &restored, nullptr) == WASTE_OK);
  CHECK(restored.tokens == straight.tokens);

  CHECK(waste_session_load(h.m, (dir.path() / "missing").c_str()) == WASTE_ERR_IO);
  CHECK(std::string(waste_last_error()).find((dir.path() / "missing").string()) != std::string::npos);
}

TEST_CASE("waste_open through waste-ioserver: two handles share one daemon and generate as in-process", "[capi][daemon]") {
  PrivateDaemonEnv env;
  waste_open_options o;
  waste_open_options_init(&o);
  o.ctx_tokens = 64;
  o.threads = 1;
  o.budget = "64M";
  Handle a, b;
  REQUIRE(waste_open(model_dir().c_str(), &o, &a.m) == WASTE_OK);
  INFO(waste_last_error());
  REQUIRE(waste_open(model_dir().c_str(), &o, &b.m) == WASTE_OK);
  waste_model_info ia, ib;
  waste_model_info_init(&ia);
  waste_model_info_init(&ib);
  REQUIRE(waste_get_model_info(a.m, &ia) == WASTE_OK);
  REQUIRE(waste_get_model_info(b.m, &ib) == WASTE_OK);
  CHECK(ia.daemon_pid > 0);
  CHECK(ia.daemon_pid == ib.daemon_pid);
  CHECK(ia.daemon_spawned == 1);
  CHECK(ib.daemon_spawned == 0);
  Collected c;
  waste_generate_params p = greedy(8);
  REQUIRE(waste_generate(b.m, kPrompt.data(), kPrompt.size(), &p, collect, &c, nullptr) == WASTE_OK);
  const std::vector<int> want = cxx_greedy(8);
  CHECK(std::vector<int>(c.tokens.begin(), c.tokens.end()) == want);
}

}  // namespace waste

namespace waste {
namespace {

// The pieces a constrained generation reported, and its outcome.
struct Constrained {
  waste_status status = WASTE_OK;
  Collected seen;
  waste_generate_result result{};
  int32_t complete = -1;
};

Constrained generate_constrained(waste_model* m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& stops,
                                 const waste_constraint& c, float temperature, uint64_t seed, int max_tokens) {
  Constrained out;
  waste_generate_params p;
  waste_generate_params_init(&p);
  p.max_tokens = max_tokens;
  p.temperature = temperature;
  p.seed = seed;
  p.stop_tokens = stops.data();
  p.n_stop_tokens = stops.size();
  waste_generate_result_init(&out.result);
  out.status = waste_generate_constrained(m, prompt.data(), prompt.size(), &p, &c, collect, &out.seen, &out.result,
                                          &out.complete);
  return out;
}

std::vector<int32_t> owned(int32_t* ids, size_t n) {
  std::vector<int32_t> v(ids, ids + n);
  waste_free(ids);
  return v;
}

}  // namespace

TEST_CASE("waste_generate_constrained with a JSON schema gives `waste run --json-schema`'s text, which validates",
          "[capi][grammar]") {
  test::ScratchDir dir;
  const fs::path schema = dir.path() / "s.json";
  const std::string schema_text =
      R"({"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":3},"c":{"enum":["r","g"]}},"required":["n","c"],"additionalProperties":false})";
  test::write_text(schema, schema_text);
  const auto doc = test::run_waste_json({"run", model_dir().string(), "JSON:", "--in-process", "--threads", "1", "--ctx",
                                         "256", "--json-schema", schema.string(), "--temp", "1", "--seed", "9", "-n",
                                         "100", "--json"});

  Handle h;
  open_in_process(h, 256);
  // The prompt and stop ids `waste run` uses with the container's chat.json.
  const waste_chat_message user{WASTE_ROLE_USER, "JSON:"};
  int32_t* ids = nullptr;
  size_t n = 0;
  REQUIRE(waste_chat_apply(h.m, nullptr, &user, 1, 1, nullptr, nullptr, &ids, &n) == WASTE_OK);
  const std::vector<int32_t> prompt = owned(ids, n);
  REQUIRE(waste_chat_stop_tokens(h.m, nullptr, &ids, &n) == WASTE_OK);
  const std::vector<int32_t> stops = owned(ids, n);
  waste_constraint c;
  waste_constraint_init(&c);
  c.json_schema = schema_text.c_str();
  const Constrained run = generate_constrained(h.m, prompt, stops, c, 1.0f, 9, 100);
  INFO(waste_last_error());
  REQUIRE(run.status == WASTE_OK);
  CHECK(run.seen.text == doc["text"].get<std::string>());
  CHECK(run.result.n_tokens == int(doc["tokens"].size()));
  CHECK(std::string(stop_reason_name(StopReason(run.result.stop_reason))) == doc["stop"].get<std::string>());
  CHECK(run.complete == 1);
  const auto v = nlohmann::json::parse(run.seen.text);
  CHECK(v.size() == 2);
  CHECK(v["n"].get<int>() >= 1);
  CHECK(v["n"].get<int>() <= 3);
  CHECK((v["c"] == "r" || v["c"] == "g"));
}

TEST_CASE("waste_generate_constrained: a grammar or schema that cannot be used is an error naming the field",
          "[capi][grammar]") {
  Handle h;
  open_in_process(h);
  const std::vector<int32_t> prompt = kPrompt;
  waste_constraint c;
  waste_constraint_init(&c);
  c.grammar = "root ::= item\n\nitem ::= [a-z] oops\n";
  Constrained run = generate_constrained(h.m, prompt, {}, c, 0.0f, 0, 8);
  CHECK(run.status == WASTE_ERR_FORMAT);
  CHECK(std::string(waste_last_error()) == "constraint.grammar: grammar line 3, column 16: undefined rule 'oops'");
  CHECK(run.seen.tokens.empty());

  waste_constraint_init(&c);
  c.json_schema = R"({"type":"object","properties":{"when":{"type":"string","format":"date"}}})";
  run = generate_constrained(h.m, prompt, {}, c, 0.0f, 0, 8);
  CHECK(run.status != WASTE_OK);
  CHECK(std::string(waste_last_error()) ==
        "constraint.json_schema: unsupported JSON Schema keyword 'format' at /properties/when");
  c.json_schema = "{\"type\": ";
  run = generate_constrained(h.m, prompt, {}, c, 0.0f, 0, 8);
  CHECK(run.status == WASTE_ERR_FORMAT);
  CHECK(std::string(waste_last_error()).rfind("constraint.json_schema: not valid JSON: ", 0) == 0);

  c.grammar = "root ::= \"a\"\n";  // both set
  run = generate_constrained(h.m, prompt, {}, c, 0.0f, 0, 8);
  CHECK(run.status == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) ==
        "waste_generate_constrained: set exactly one of constraint.grammar and constraint.json_schema");
  CHECK(waste_generate_constrained(h.m, prompt.data(), prompt.size(), nullptr, nullptr, nullptr, nullptr, nullptr,
                                   nullptr) == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) ==
        "waste_generate_constrained: constraint is NULL or not initialized (waste_constraint_init)");
}

TEST_CASE("waste_chat_apply_tools declares the tools as `waste serve` does, bad tools are refused by field",
          "[capi][tools]") {
  Handle h;
  open_in_process(h);
  const waste_tool tools[1] = {{"get_weather", "Current weather",
                                R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"}};
  const waste_chat_message user{WASTE_ROLE_USER, "Weather in Paris?"};
  char* text = nullptr;
  size_t len = 0;
  int32_t* ids = nullptr;
  size_t n = 0;
  REQUIRE(waste_chat_apply_tools(h.m, nullptr, &user, 1, tools, 1, 1, &text, &len, &ids, &n) == WASTE_OK);
  const std::string declared =
      R"([{"function":{"description":"Current weather","name":"get_weather","parameters":{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}},"type":"function"}])";
  CHECK(std::string(text, len) == "<|open|>message role=\"tool_declare\"<|sep|>" + declared +
                                      "<|close|>message<|sep|><|end_of_msg|>"
                                      "<|open|>message role=\"user\"<|sep|>Weather in Paris?<|close|>message<|sep|>"
                                      "<|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>");
  auto tok = Tokenizer::load(model_dir());
  REQUIRE(tok);
  auto format = ChatFormat::load_from_container(model_dir());
  REQUIRE(format);
  REQUIRE(*format);
  std::vector<ChatMessage> messages(1);
  messages[0].content = "Weather in Paris?";
  CHECK(std::vector<int>(ids, ids + n) == build_chat_prompt(*tok, **format, messages, true, declared));
  waste_free(text);
  waste_free(ids);

  // Hazard: a name goes into the tool-name grammar unescaped; only [a-zA-Z0-9_-]{1,64} passes.
  const waste_tool quoted[1] = {{"get\"weather", nullptr, nullptr}};
  CHECK(waste_chat_apply_tools(h.m, nullptr, &user, 1, quoted, 1, 1, &text, &len, nullptr, nullptr) ==
        WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) == "waste_chat_apply_tools: tools[0].name must be a string of 1 to 64 "
                                           "characters from a-z, A-Z, 0-9, _ and -");
  const waste_tool twice[2] = {{"f", nullptr, nullptr}, {"f", nullptr, nullptr}};
  CHECK(waste_chat_apply_tools(h.m, nullptr, &user, 1, twice, 2, 1, &text, &len, nullptr, nullptr) == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) == "waste_chat_apply_tools: tools[1].name \"f\" is declared twice");
  const waste_tool array_params[1] = {{"f", nullptr, "[1]"}};
  CHECK(waste_chat_apply_tools(h.m, nullptr, &user, 1, array_params, 1, 1, &text, &len, nullptr, nullptr) ==
        WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) == "waste_chat_apply_tools: tools[0].parameters must be a JSON Schema object");
  const fs::path plain = fs::path(WASTE_SOURCE_DIR) / "configs/chat/deepseek-v3.json";
  auto ds = ChatFormat::load(plain);
  REQUIRE(ds);
  if (!ds->tools) {
    CHECK(waste_chat_apply_tools(h.m, plain.c_str(), &user, 1, tools, 1, 1, &text, &len, nullptr, nullptr) ==
          WASTE_ERR_UNSUPPORTED);
    CHECK(std::string(waste_last_error()) == "waste_chat_apply_tools: the chat format has no tool-call markup "
                                             "(a \"tools\" object in chat.json)");
  }
}

TEST_CASE("waste_parse_tool_calls gives the calls of Kimi and JSON markup with exact names and arguments",
          "[capi][tools]") {
  Handle h;
  open_in_process(h);
  char* content = nullptr;
  char* calls = nullptr;
  const std::string kimi =
      "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>";
  REQUIRE(waste_parse_tool_calls(h.m, nullptr, kimi.data(), kimi.size(), &content, &calls) == WASTE_OK);
  CHECK(std::string(content) == "Let me check.");
  CHECK(std::string(calls) ==
        R"([{"arguments":"{\"city\": \"Paris\"}","id":"functions.get_weather:0","name":"get_weather"}])");
  waste_free(content);
  waste_free(calls);

  const std::string chatml = (fs::path(WASTE_SOURCE_DIR) / "configs/chat/chatml.json").string();
  const std::string json_form = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
  REQUIRE(waste_parse_tool_calls(h.m, chatml.c_str(), json_form.data(), json_form.size(), &content, &calls) == WASTE_OK);
  CHECK(std::string(content).empty());
  CHECK(std::string(calls) == R"([{"arguments":"{\"a\": 1, \"b\": 2}","id":"call_0","name":"add"}])");
  waste_free(content);
  waste_free(calls);

  const std::string none = "no calls here";
  REQUIRE(waste_parse_tool_calls(h.m, nullptr, none.data(), none.size(), &content, &calls) == WASTE_OK);
  CHECK(std::string(content) == "no calls here");
  CHECK(std::string(calls) == "[]");
  waste_free(content);
  waste_free(calls);
}

TEST_CASE("A grammar-forced tool call generated through the C API comes back parsed with its exact arguments",
          "[capi][tools][grammar]") {
  Handle h;
  open_in_process(h, 1024);
  const std::string chatml = (fs::path(WASTE_SOURCE_DIR) / "configs/chat/chatml.json").string();
  const waste_tool tools[1] = {{"get_weather", nullptr, R"({"type":"object","properties":{"city":{"type":"string"}}})"}};
  const waste_chat_message user{WASTE_ROLE_USER, "Weather in Paris?"};
  int32_t* ids = nullptr;
  size_t n = 0;
  REQUIRE(waste_chat_apply_tools(h.m, chatml.c_str(), &user, 1, tools, 1, 1, nullptr, nullptr, &ids, &n) == WASTE_OK);
  const std::vector<int32_t> prompt = owned(ids, n);
  waste_constraint c;
  waste_constraint_init(&c);
  c.grammar = R"(root ::= "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" [a-z]{1,8} "\"}}\n</tool_call>")";
  const Constrained run = generate_constrained(h.m, prompt, {}, c, 1.0f, 3, 120);
  INFO(waste_last_error());
  REQUIRE(run.status == WASTE_OK);
  INFO("text: " << run.seen.text << " stop " << run.result.stop_reason << " n " << run.result.n_tokens);
  CHECK(run.complete == 1);
  const std::string head = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"";
  REQUIRE(run.seen.text.rfind(head, 0) == 0);
  const std::string city = run.seen.text.substr(head.size(), run.seen.text.find('"', head.size()) - head.size());
  CHECK(!city.empty());
  char* content = nullptr;
  char* calls = nullptr;
  REQUIRE(waste_parse_tool_calls(h.m, chatml.c_str(), run.seen.text.data(), run.seen.text.size(), &content, &calls) ==
          WASTE_OK);
  CHECK(std::string(content).empty());
  CHECK(std::string(calls) == R"([{"arguments":"{\"city\": \")" + city + R"(\"}","id":"call_0","name":"get_weather"}])");
  waste_free(content);
  waste_free(calls);
}

TEST_CASE("waste_generate_tool_call forces serve's call markup, the call parses back with schema-valid arguments",
          "[capi][tools]") {
  Handle h;
  open_in_process(h, 512);
  const waste_tool tools[2] = {
      {"get_weather", nullptr,
       R"({"type":"object","properties":{"city":{"enum":["Paris","Rome"]}},"required":["city"],"additionalProperties":false})"},
      {"get_time", nullptr, R"({"type":"object","properties":{"utc":{"type":"boolean"}},"required":["utc"],"additionalProperties":false})"}};
  const waste_chat_message user{WASTE_ROLE_USER, "Weather in Paris?"};
  int32_t* ids = nullptr;
  size_t n = 0;
  REQUIRE(waste_chat_apply_tools(h.m, nullptr, &user, 1, tools, 2, 1, nullptr, nullptr, &ids, &n) == WASTE_OK);
  const std::vector<int32_t> prompt = owned(ids, n);
  waste_generate_params p;
  waste_generate_params_init(&p);
  p.max_tokens = 200;
  p.temperature = 1.0f;
  p.seed = 5;

  // Named: the whole header is forced (Kimi: the id is functions.NAME:IDX, IDX = calls so far).
  Collected named;
  waste_generate_result r;
  waste_generate_result_init(&r);
  REQUIRE(waste_generate_tool_call(h.m, nullptr, prompt.data(), prompt.size(), &p, tools, 2, "get_weather", 2, collect,
                                   &named, &r) == WASTE_OK);
  CHECK(r.stop_reason == WASTE_STOP_STOP_TOKEN);
  CHECK(r.n_tokens == int(named.tokens.size()));
  const std::string head = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:2<|tool_call_argument_begin|>";
  const std::string tail = "<|tool_call_end|><|tool_calls_section_end|>";
  INFO(named.text);
  REQUIRE(named.text.rfind(head, 0) == 0);
  REQUIRE(named.text.size() > head.size() + tail.size());
  REQUIRE(named.text.compare(named.text.size() - tail.size(), tail.size(), tail) == 0);
  const std::string arguments = named.text.substr(head.size(), named.text.size() - head.size() - tail.size());
  const auto args = nlohmann::json::parse(arguments);
  CHECK(args.size() == 1);
  CHECK((args["city"] == "Paris" || args["city"] == "Rome"));
  char* content = nullptr;
  char* calls = nullptr;
  REQUIRE(waste_parse_tool_calls(h.m, nullptr, named.text.data(), named.text.size(), &content, &calls) == WASTE_OK);
  CHECK(std::string(content).empty());
  CHECK(std::string(calls) == nlohmann::json::array({{{"arguments", arguments}, {"id", "functions.get_weather:2"},
                                                      {"name", "get_weather"}}}).dump());
  waste_free(content);
  waste_free(calls);

  // Required: a grammar picks the name, that tool's schema constrains the arguments.
  Collected required;
  REQUIRE(waste_reset(h.m) == WASTE_OK);
  const waste_status st = waste_generate_tool_call(h.m, nullptr, prompt.data(), prompt.size(), &p, tools, 2, nullptr, 0,
                                                   collect, &required, nullptr);
  INFO(waste_last_error());
  REQUIRE(st == WASTE_OK);
  REQUIRE(waste_parse_tool_calls(h.m, nullptr, required.text.data(), required.text.size(), &content, &calls) ==
          WASTE_OK);
  const auto parsed = nlohmann::json::parse(calls);
  waste_free(content);
  waste_free(calls);
  INFO(required.text);
  REQUIRE(parsed.size() == 1);
  const std::string name = parsed[0]["name"];
  CHECK(parsed[0]["id"] == "functions." + name + ":0");
  const auto a = nlohmann::json::parse(parsed[0]["arguments"].get<std::string>());
  if (name == "get_weather") {
    CHECK((a["city"] == "Paris" || a["city"] == "Rome"));
  } else {
    CHECK(name == "get_time");
    CHECK(a["utc"].is_boolean());
  }

  CHECK(waste_generate_tool_call(h.m, nullptr, prompt.data(), prompt.size(), &p, tools, 2, "get_date", 0, nullptr,
                                 nullptr, nullptr) == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) == "waste_generate_tool_call: tool_name \"get_date\" is not one of the tools");
  const waste_tool bad[1] = {{"f", nullptr, R"({"type":"object","properties":{"d":{"type":"string","format":"date"}}})"}};
  CHECK(waste_generate_tool_call(h.m, nullptr, prompt.data(), prompt.size(), &p, bad, 1, nullptr, 0, nullptr, nullptr,
                                 nullptr) == WASTE_ERR_ARGUMENT);
  CHECK(std::string(waste_last_error()) == "waste_generate_tool_call: 'tools[0].function.parameters': unsupported JSON "
                                           "Schema keyword 'format' at /properties/d");
}

}  // namespace waste
