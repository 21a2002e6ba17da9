// waste chat: a conversation saved with /save and resumed with /load in another process
// continues exactly as the uninterrupted one; commands and their errors.
#include <catch2/catch.hpp>

#include "cli_test_support.hpp"

namespace waste {
namespace {

std::vector<std::string> chat_args(const std::string& format) {
  return {"chat",  test::tokenizer_container().string(),
          "--threads", "1", "--ctx", "512", "-n", "12", "--temp", "0.9", "--seed", "77", "-q",
          "--chat-format", format, "--system", "You are terse."};
}

std::string k3_format() { return std::string(WASTE_SOURCE_DIR) + "/configs/chat/kimi-k3.json"; }

}  // namespace

TEST_CASE("waste chat /save then /load in a new process continues the same conversation", "[cli][chat]") {
  test::ScratchDir dir;
  const std::string session = (dir.path() / "turn1.session").string();
  const auto args = chat_args(k3_format());

  const auto uninterrupted = test::run_waste(args, "hello there\nand then?\n");
  INFO(uninterrupted.err);
  REQUIRE(uninterrupted.rc == 0);
  const auto saved = test::run_waste(args, "hello there\n/save " + session + "\nand then?\n");
  INFO(saved.err);
  REQUIRE(saved.rc == 0);
  CHECK(saved.out == uninterrupted.out);  // saving does not disturb the conversation
  CHECK(saved.err.find("[saved " + session + " at position ") != std::string::npos);

  const auto resumed = test::run_waste(args, "/load " + session + "\nand then?\n");
  INFO(resumed.err);
  REQUIRE(resumed.rc == 0);
  CHECK(resumed.err.find("[loaded " + session + " at position ") != std::string::npos);
  // The resumed process prints only the second reply: the tail of the uninterrupted output.
  REQUIRE(resumed.out.size() > 1);
  REQUIRE(resumed.out.size() < uninterrupted.out.size());
  CHECK(uninterrupted.out.substr(uninterrupted.out.size() - resumed.out.size()) == resumed.out);

  // Without the loaded state the same turn gets another reply.
  const auto cold = test::run_waste(args, "and then?\n");
  REQUIRE(cold.rc == 0);
  CHECK(cold.out != resumed.out);
}

TEST_CASE("waste chat commands: /stats, /reset, /quit, errors", "[cli][chat]") {
  const auto args = chat_args(k3_format());
  const auto ran = test::run_waste(args, "/stats\n/bogus\n/load\n/reset\n/stats\n/quit\nnever answered\n");
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto lines = test::split_lines(ran.out);
  REQUIRE(lines.size() == 2);  // the two /stats lines; nothing after /quit
  // The system prompt is prefilled at start and again after /reset: same position both times.
  CHECK(lines[0].starts_with("position "));
  CHECK(lines[0].find(" of 512  experts hit ") != std::string::npos);
  CHECK(lines[0].substr(0, lines[0].find(" of ")) == lines[1].substr(0, lines[1].find(" of ")));
  CHECK(lines[0] != "position 0 of 512");
  CHECK(ran.err.find("waste chat: unknown command /bogus (/reset, /save FILE, /load FILE, /image FILE, /stats, /quit)\n") !=
        std::string::npos);
  CHECK(ran.err.find("waste chat: /load needs a file name\n") != std::string::npos);
  CHECK(ran.err.find("[reset]\n") != std::string::npos);
}

TEST_CASE("waste chat refuses a session of another model and keeps its state", "[cli][chat]") {
  test::ScratchDir dir;
  const auto other = dir.path() / "three-layers.waste";
  auto made = test::run_waste({"synth", "--preset", "tiny", "--tokenizer", "--layers", "3", "--out", other.string()});
  INFO(made.err);
  REQUIRE(made.rc == 0);
  const std::string session = (dir.path() / "other.session").string();
  auto other_args = chat_args(k3_format());
  other_args[1] = other.string();
  auto saved = test::run_waste(other_args, "hi\n/save " + session + "\n");
  INFO(saved.err);
  REQUIRE(saved.rc == 0);

  // In-process: through the daemon the second run would find the first one's cache warm (one
  // shared cache per container while the daemon lingers), and the counters would differ.
  auto args = chat_args(k3_format());
  args.push_back("--in-process");
  const auto before = test::run_waste(args, "/stats\n");
  const auto refused = test::run_waste(args, "/load " + session + "\n/stats\n");
  REQUIRE(refused.rc == 0);
  CHECK(refused.err == "waste chat: session " + session + ": n_layers 3 != model 4\n");
  CHECK(refused.out == before.out);  // same position, same counters: nothing was touched
}

}  // namespace waste
