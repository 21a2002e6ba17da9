// The commands' one open (cli_common's open_engine over compute/api/engine_open.hpp): the
// container's description is read once and the tokenizer comes from it, whether the command read
// it first (chat, eval) or the open did (run, serve).
#include <catch2/catch.hpp>

#include "cli/cli_common.hpp"
#include "cli_test_support.hpp"
#include "shared/container/manifest_parses.hpp"

using namespace waste;

TEST_CASE("a command's open and its tokenizer parse manifest.json once, in-process too",
          "[cli][open_engine]") {
  cli::EngineArgs args;
  args.model = test::tokenizer_container().string();
  args.ctx = 64;
  args.threads = 1;
  args.in_process = true;
  args.cache_records = 4;

  SECTION("run, serve: the open reads it, the tokenizer takes Engine::container()") {
    const std::uint64_t before = manifest_parses();
    auto opened = cli::open_engine(args);
    if (!opened) FAIL(opened.error().message);
    auto tokenizer = cli::load_tokenizer((*opened)->container());
    REQUIRE(tokenizer);
    CHECK(manifest_parses() - before == 1);  // the description, handed to the private IoServer too
    if ((*opened)->config().eos_token_id > 0) CHECK(tokenizer->eos() == (*opened)->config().eos_token_id);
  }
  SECTION("chat, eval: the command reads it for the tokenizer and hands it to the open") {
    const std::uint64_t before = manifest_parses();
    auto container = read_container(args.model);
    REQUIRE(container);
    auto tokenizer = cli::load_tokenizer(**container);
    REQUIRE(tokenizer);
    auto opened = cli::open_engine(args, *container);
    if (!opened) FAIL(opened.error().message);
    CHECK(manifest_parses() - before == 1);
    CHECK(&(*opened)->container() == container->get());
  }
}

TEST_CASE("the open refuses --cache-records without --in-process in the words it always used", "[cli][open_engine]") {
  cli::EngineArgs args;
  args.model = test::tokenizer_container().string();
  args.cache_records = 4;
  auto refused = cli::open_engine(args);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message ==
        "--cache-records sizes the in-process cache; with a daemon use --budget (or add --in-process)");
}
