// The daemon's option set, defined once (ioserver/control/daemon_cli.hpp): parsing, range
// checks in words, the renamed --clients, and the argv waste-ctl start hands waste-ioserver.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <algorithm>

#include "ioserver/options/daemon_cli.hpp"

using namespace waste;
using namespace waste::ioserver;

namespace {

// Parse `args` (after the program name) with the daemon's options; the error text, or the options.
Result<DaemonOptions> parse(std::vector<std::string> args) {
  CLI::App app{"test"};
  DaemonCli cli;
  add_daemon_options(app, cli);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
  app.parse(reversed);
  return daemon_options(cli);
}

}  // namespace

TEST_CASE("Daemon options out of range are refused in words, naming the option and the bounds",
          "[ioserver][control][cli]") {
  const auto [args, text] = GENERATE(table<std::vector<std::string>, std::string>({
      {{"m", "--max-clients", "65"}, "--max-clients must be between 1 and 64, not 65"},
      {{"m", "--max-clients", "0"}, "--max-clients must be between 1 and 64, not 0"},
      {{"m", "--reader-threads", "0"}, "--reader-threads must be between 1 and 64, not 0"},
      {{"m", "--reserve-clients", "100"}, "--reserve-clients must be between 1 and 64, not 100"},
      {{"m", "--linger", "3600001"}, "--linger must be between 0 and 3600000, not 3600001"},
      {{"m", "--first-attach-grace", "-5"}, "--first-attach-grace must be between 0 and 3600000, not -5"},
      {{"m", "--budget", "lots"}, "--budget: "},
      {{"m", "--engram-pool", "1K"}, "--engram-pool must be between 4K and 4G, not 1K"},
      {{"m", "--engram-pool", "8G"}, "--engram-pool must be between 4K and 4G, not 8G"},
      {{"m", "--engram-pool", "some"}, "--engram-pool: "},
  }));
  INFO(args[1]);
  auto parsed = parse(args);
  REQUIRE_FALSE(parsed);
  CHECK(parsed.error().code == Errc::argument);
  if (text.ends_with(": ")) {
    CHECK(parsed.error().message.starts_with(text));  // parse_bytes' own text follows
  } else {
    CHECK(parsed.error().message == text);
  }
}

TEST_CASE("The old --clients is refused with its new name (it clashed with --max-clients)", "[ioserver][control][cli]") {
  auto parsed = parse({"m", "--clients", "2"});
  REQUIRE_FALSE(parsed);
  CHECK(parsed.error().message ==
        "--clients was renamed --reserve-clients (clients whose state the budget reserves room for; "
        "--max-clients caps how many attach)");
}

TEST_CASE("Every daemon option lands in DaemonOptions, and daemon_argv gives the same options back",
          "[ioserver][control][cli]") {
  auto parsed = parse({"/some/model.waste", "--budget", "8M", "--name", "inst", "--policy", "lru", "--log",
                       "/tmp/d.log", "--reader-threads", "3", "--no-direct-io", "--io-uring", "--verify",
                       "--reserve-clients", "2", "--max-clients", "5", "--no-populate", "--fill", "off",
                       "--remove-log-on-stop", "--linger", "250", "--first-attach-grace", "40"});
  REQUIRE(parsed);
  const DaemonOptions& o = *parsed;
  CHECK(o.io.container == "/some/model.waste");
  CHECK(o.budget_bytes == std::uint64_t(8) << 20);
  CHECK(o.io.instance == "inst");
  CHECK(o.io.policy == CachePolicy::lru);
  CHECK(o.log_file == "/tmp/d.log");
  CHECK(o.io.reader_threads == 3);
  CHECK_FALSE(o.io.direct_io);
  CHECK(o.io.io_uring);
  CHECK(o.io.verify_crc);
  CHECK(o.reserved_clients == 2);
  CHECK(o.io.max_clients == 5);
  CHECK_FALSE(o.io.populate_arena);
  CHECK_FALSE(o.io.fill);
  CHECK(o.remove_log_on_clean_stop);
  CHECK(o.linger == std::chrono::milliseconds(250));
  CHECK(o.first_attach_grace == std::chrono::milliseconds(40));

  const std::vector<std::string> argv = daemon_argv(o);
  CHECK(argv == std::vector<std::string>{"/some/model.waste", "--budget", "8388608", "--name", "inst", "--policy",
                                         "lru", "--log", "/tmp/d.log", "--reader-threads", "3", "--no-direct-io",
                                         "--io-uring", "--verify", "--reserve-clients", "2", "--max-clients", "5",
                                         "--no-populate", "--fill", "off", "--remove-log-on-stop", "--linger", "250",
                                         "--first-attach-grace", "40"});
  auto again = parse(argv);
  REQUIRE(again);
  CHECK(daemon_argv(*again) == argv);

  // Defaults: nothing but the model.
  auto plain = parse({"/some/model.waste"});
  REQUIRE(plain);
  CHECK(daemon_argv(*plain) == std::vector<std::string>{"/some/model.waste"});
  CHECK_FALSE(plain->linger);
  CHECK(plain->io.max_clients == 16);
  CHECK(plain->io.reader_threads == 4);  // kDefaultReaderThreads (measured, issue 15)
  CHECK(plain->reserved_clients == 1);
  CHECK(plain->io.fill);                 // the background fill is the daemon's default
  CHECK(DaemonOptions{}.io.fill);
  CHECK_FALSE(IoServerConfig{}.fill);    // the data plane alone (tests, in-process) reads only what is asked
  CHECK(parse({"/some/model.waste", "--fill", "on"})->io.fill);
}

TEST_CASE("The daemon option --engram-pool sets the Engram pool in whole pages and daemon_argv gives it back", "[ioserver][control][cli]") {
  auto parsed = parse({"/some/model.waste", "--engram-pool", "16M"});
  REQUIRE(parsed);
  CHECK(parsed->io.engram_pool_pages == 4096);
  const auto argv = daemon_argv(*parsed);
  const auto it = std::find(argv.begin(), argv.end(), std::string("--engram-pool"));
  REQUIRE(it != argv.end());
  REQUIRE(it + 1 != argv.end());
  CHECK(*(it + 1) == std::to_string(std::uint64_t{16} << 20));
  auto again = parse(argv);
  REQUIRE(again);
  CHECK(again->io.engram_pool_pages == 4096);
  auto plain = parse({"/some/model.waste"});
  REQUIRE(plain);
  CHECK(plain->io.engram_pool_pages == 0);  // automatic
  CHECK(engram_pool_pages_for(std::uint64_t{40} << 30) == 16384);  // 5% of 40 GiB is above the 64 MiB cap
  CHECK(engram_pool_pages_for(std::uint64_t{100} << 20) == 1280);  // 5% of 100 MiB
  CHECK(engram_pool_pages_for(4096) == 64);                        // the floor
}

TEST_CASE("Each daemon option's help names its default", "[ioserver][control][cli]") {
  CLI::App app{"test"};
  DaemonCli cli;
  add_daemon_options(app, cli);
  const std::string help = app.help();
  for (const char* line : {"disk reader threads, 1..64 (default 4)", "most clients attached at once, 1..64 (default 16)",
                           "reserves room for, 1..64 (default 1)", "expert cache policy, echo, reuse, lfru or lru (default echo)",
                           "ms to wait for the first client, 0..3600000 (default 10000)"}) {
    INFO(line);
    CHECK(help.find(line) != std::string::npos);
  }
  CHECK(help.find("--clients ") == std::string::npos);  // the removed name is hidden
}
