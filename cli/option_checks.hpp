// Checks for `waste` option values, run by CLI11 while it parses -- before a command opens a
// file or starts a daemon. Each check gets the raw text of the value (CLI11 validates before
// it converts), so "abc", "-1" and "0" all get a message in words that names the option:
// "--ctx must be between 1 and 1048576", "--budget: '12Q' is not a size (use e.g. 8G, 500M)".
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace waste::cli {

// Context length bound of every command that takes --ctx.
inline constexpr std::int64_t kMaxCtxTokens = 1 << 20;
inline constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

// A bad option value. Thrown from the checks rather than returned: CLI11 would prefix a
// returned message with the option name ("--ctx: --ctx must be ..."). main() prints it as
// "waste COMMAND: MESSAGE" and exits with kOptionErrorExit.
class OptionError : public CLI::ParseError {
 public:
  explicit OptionError(std::string message);
};
inline constexpr int kOptionErrorExit = 2;

// A whole number in [min, max]. Messages: "NAME: 'x' is not a whole number",
// "NAME must be between MIN and MAX" ("NAME must be >= MIN" when max is kIntMax, i.e. only
// the type bounds it; a value past the type then gets "NAME must be at most 2147483647").
CLI::Validator int_range(std::string name, std::int64_t min, std::int64_t max);
// Any unsigned 64-bit value (seeds): "NAME must be between 0 and 18446744073709551615".
CLI::Validator u64_value(std::string name);

// A finite real number. Bounds are inclusive unless marked open:
// "NAME must be >= 0", "NAME must be > 0", "NAME must be > 0 and <= 1", "NAME: 'x' is not a number".
struct RealBound {
  double value = 0;
  bool open = false;  // the bound itself is excluded
};
CLI::Validator real_min(std::string name, RealBound min);
CLI::Validator real_range(std::string name, RealBound min, RealBound max);

// One of a fixed set: "NAME must be one of 2, 3, 4".
CLI::Validator one_of(std::string name, std::vector<std::string> values);
CLI::Validator one_of(std::string name, const std::vector<int>& values);

// A byte size ("8G", "500M", "123456"; parse_bytes). "auto" is the automatic budget and reaches
// the bound string as "" (a transform, not a check). Zero is refused: no budget holds a model.
// "NAME: '12Q' is not a size (use e.g. 8G, 500M)", "NAME must be above 0 (omit it for the automatic budget)".
CLI::Validator byte_size(std::string name);
// A comma-separated list of byte sizes (bench --sweep): "NAME: 'lots' is not a size (use e.g. 500M,2G)".
CLI::Validator byte_size_list(std::string name);

}  // namespace waste::cli
