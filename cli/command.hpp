// Subcommands register themselves: each cmd_<name>.cpp defines a static CommandRegistration,
// and main() adds every registered command to the CLI11 app. A command returns the process
// exit code; it reports its own errors on stderr.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace waste::cli {

struct Command {
  std::string name;
  std::string description;
  // Add options to `sub`; return the function that runs the command once parsed.
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& command_registry();

struct CommandRegistration {
  explicit CommandRegistration(Command command) { command_registry().push_back(std::move(command)); }
};

}  // namespace waste::cli
