// waste run in text mode: the streamed text is exactly the decoding of what ids mode generates
// from the same prompt, then one stats line on stderr.
#include <catch2/catch.hpp>

#include <regex>

#include "cli_test_support.hpp"
#include "compute/prompt/stop_text.hpp"
#include "compute/prompt/chat_format.hpp"
#include "compute/tokenizer/tokenizer.hpp"

namespace waste {
namespace {

std::string comma_ids(const std::vector<int>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

std::vector<int> ids_of(const std::string& line) {
  std::vector<int> ids;
  std::istringstream in(line);
  for (int id; in >> id;) ids.push_back(id);
  return ids;
}

const std::vector<std::string> kCommon = {"--threads", "1", "--ctx", "256", "-n", "16", "--temp", "0.8", "--seed", "5"};

std::vector<std::string> with(std::vector<std::string> head, const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

}  // namespace

TEST_CASE("waste run streams the text of the generated ids", "[cli][run_text]") {
  const auto& model = test::tokenizer_container();
  auto tok = Tokenizer::load(model);
  REQUIRE(tok);
  const std::string prompt = "Once upon a time, in a café,";
  auto ids_run = test::run_waste(
      with({"run", model.string(), "--ids", comma_ids(tok->encode(prompt)), "--ignore-eos"}, kCommon));
  INFO(ids_run.err);
  REQUIRE(ids_run.rc == 0);
  const std::vector<int> generated = ids_of(ids_run.out);
  REQUIRE(generated.size() == 16);

  auto text_run = test::run_waste(with({"run", model.string(), prompt, "--ignore-eos"}, kCommon));
  INFO(text_run.err);
  REQUIRE(text_run.rc == 0);
  CHECK(text_run.out == tok->decode(generated) + "\n");
  const auto err_lines = test::split_lines(text_run.err);
  REQUIRE_FALSE(err_lines.empty());
  CHECK(std::regex_match(err_lines.back(),
                         std::regex(R"(tokens 16  seconds [0-9.]+  tok/s [0-9.]+  experts hit \d+ \([0-9.]+%\) )"
                                    R"(miss \d+  GB read [0-9.]+)")));
}

TEST_CASE("waste run --chat-format --system wraps the prompt and stops at the assistant suffix", "[cli][run_text]") {
  const auto& model = test::tokenizer_container();
  auto tok = Tokenizer::load(model);
  REQUIRE(tok);
  const std::string format_file = std::string(WASTE_SOURCE_DIR) + "/configs/chat/kimi-k3.json";
  auto format = ChatFormat::load(format_file);
  REQUIRE(format);
  const std::vector<ChatMessage> messages = {{ChatRole::system, "Be brief."}, {ChatRole::user, "Say something."}};
  const std::vector<int> prompt = build_chat_prompt(*tok, *format, messages);
  const ChatStop stop = chat_stop(*tok, *format);

  auto ids_run = test::run_waste(
      with({"run", model.string(), "--ids", comma_ids(prompt), "--stop", comma_ids(stop.ids)}, kCommon));
  REQUIRE(ids_run.rc == 0);
  std::vector<int> generated = ids_of(ids_run.out);
  if (!generated.empty() && std::find(stop.ids.begin(), stop.ids.end(), generated.back()) != stop.ids.end()) {
    generated.pop_back();  // the stop token is not printed
  }
  std::string expected = tok->decode(generated);
  if (const auto at = expected.find(stop.text); at != std::string::npos) expected.resize(at);

  auto text_run = test::run_waste(with({"run", model.string(), "Say something.", "--system", "Be brief.",
                                        "--chat-format", format_file},
                                       kCommon));
  INFO(text_run.err);
  REQUIRE(text_run.rc == 0);
  CHECK(text_run.out == expected + "\n");
}

TEST_CASE("Utf8Stream and StopTextStream never split characters or print a stop text", "[cli][run_text]") {
  Utf8Stream utf8;
  const std::string euro = "\xE2\x82\xAC";  // one character in three bytes
  CHECK(utf8.push(euro.substr(0, 1)).empty());
  CHECK(utf8.push(euro.substr(1, 1)).empty());
  CHECK(utf8.push(euro.substr(2) + "a") == euro + "a");
  CHECK(utf8.push("\xC3").empty());
  CHECK(utf8.flush() == "\xC3");

  StopTextStream stream({"<END>"});
  CHECK(stream.push("hello <") == "hello ");  // "<" may start the stop text
  CHECK(stream.push("E") .empty());
  CHECK(stream.push("x") == "<Ex");           // it did not
  CHECK(stream.push(" ok <EN") == " ok ");
  CHECK(stream.push("D> tail").empty());
  CHECK(stream.stopped());
  CHECK(stream.finish().empty());

  StopTextStream open_end({"<END>"});
  CHECK(open_end.push("abc<EN") == "abc");
  CHECK(open_end.finish() == "<EN");
}

}  // namespace waste

namespace waste {

TEST_CASE("waste run --file, -q and --json give the same generation as the plain run", "[cli][run_text]") {
  const auto& model = test::tokenizer_container();
  auto tok = Tokenizer::load(model);
  REQUIRE(tok);
  const std::string prompt = "Once upon a time, in a café,";
  const auto prompt_file = std::filesystem::temp_directory_path() / ("waste-run-prompt-" + std::to_string(::getpid()));
  test::write_text(prompt_file, prompt);

  auto plain = test::run_waste(with({"run", model.string(), prompt, "--ignore-eos"}, kCommon));
  REQUIRE(plain.rc == 0);
  auto from_file = test::run_waste(with({"run", model.string(), "--file", prompt_file.string(), "--ignore-eos", "-q"}, kCommon));
  INFO(from_file.err);
  REQUIRE(from_file.rc == 0);
  CHECK(from_file.out == plain.out);
  CHECK(from_file.err.empty());  // -q: no stats line

  auto as_json = test::run_waste(with({"run", model.string(), prompt, "--ignore-eos", "--json"}, kCommon));
  REQUIRE(as_json.rc == 0);
  const auto doc = nlohmann::json::parse(as_json.out);
  const auto tokens = doc.at("tokens").get<std::vector<int>>();
  REQUIRE(tokens.size() == 16);
  CHECK(tok->decode(tokens) + "\n" == plain.out);  // "text" itself is JSON-escaped, invalid UTF-8 replaced
  CHECK_FALSE(doc.at("text").get<std::string>().empty());
  CHECK(doc.at("stop") == "max_tokens");
  CHECK(doc.at("stats").at("tokens") == 16);

  auto both = test::run_waste({"run", model.string(), prompt, "--file", prompt_file.string()});
  CHECK(both.rc == 1);
  CHECK(both.err == "waste run: give either a prompt text or --file (not both)\n");
  std::filesystem::remove(prompt_file);
}

}  // namespace waste
