// waste: parse, dispatch to the chosen subcommand, turn escaped exceptions into exit codes.
#include <algorithm>
#include <cstdio>
#include <exception>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/command.hpp"
#include "cli/option_checks.hpp"

namespace waste::cli {
std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}
}  // namespace waste::cli

int main(int argc, char** argv) {
  using waste::cli::command_registry;
  // stdout carries command output (ids, text, JSON); library log lines go to stderr.
  // Warnings and errors only unless SPDLOG_LEVEL says otherwise (e.g. SPDLOG_LEVEL=info).
  spdlog::set_default_logger(spdlog::stderr_color_mt("waste"));
  spdlog::set_level(spdlog::level::warn);
  spdlog::cfg::load_env_levels();
  CLI::App app{"WASTE: run mixture-of-experts models larger than RAM"};
  app.require_subcommand(1);
  // --help shows every option's default ("--ctx TOKENS=4096"); options whose default is not a
  // value (a sentinel, "none") set theirs in words with default_str.
  app.option_defaults()->always_capture_default();
  auto& commands = command_registry();
  std::sort(commands.begin(), commands.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::function<int()> chosen;
  for (auto& command : commands) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    auto run = command.setup(*sub);
    sub->callback([&chosen, run] { chosen = run; });
  }
  try {
    app.parse(argc, argv);
  } catch (const waste::cli::OptionError& e) {
    // A value our checks refused: one line like every other command error.
    const auto parsed = app.get_subcommands();
    std::fprintf(stderr, "waste %s: %s\n", parsed.empty() ? "" : parsed.front()->get_name().c_str(), e.what());
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return chosen ? chosen() : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "waste: %s\n", e.what());
    return 1;
  }
}
