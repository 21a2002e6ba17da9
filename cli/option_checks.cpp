#include "cli/option_checks.hpp"

#include <charconv>
#include <cmath>
#include <optional>

#include "shared/memory/budget.hpp"

namespace waste::cli {

OptionError::OptionError(std::string message) : CLI::ParseError("OptionError", std::move(message), kOptionErrorExit) {}

namespace {

// The value as a whole number; nullopt unless the text is all digits (one leading '-').
// __int128 holds both int64 and uint64 ranges, so one comparison covers every bound.
std::optional<__int128> whole_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (text[0] == '-') {
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(first, last, v);
    // Below every bound, not "not a number": the message then names the range.
    if (ec == std::errc::result_out_of_range && ptr == last) return __int128(std::numeric_limits<std::int64_t>::min()) - 1;
    if (ec != std::errc() || ptr != last) return std::nullopt;
    return __int128(v);
  }
  std::uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec == std::errc::result_out_of_range && ptr == last) return __int128(std::numeric_limits<std::uint64_t>::max()) + 1;
  if (ec != std::errc() || ptr != last) return std::nullopt;
  return __int128(v);
}

std::optional<double> real_number(const std::string& text) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// 0.5 -> "0.5", 1 -> "1": bounds are printed as a user would type them.
std::string number_text(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, ptr) : std::to_string(v);
}

std::string bound_text(const char* inclusive, const char* open, RealBound b) {
  return std::string(b.open ? open : inclusive) + " " + number_text(b.value);
}

bool above(double v, RealBound b) { return b.open ? v > b.value : v >= b.value; }
bool below(double v, RealBound b) { return b.open ? v < b.value : v <= b.value; }

CLI::Validator checker(std::function<void(const std::string&)> check) {
  return CLI::Validator(
      [check = std::move(check)](std::string& value) {
        check(value);
        return std::string();
      },
      /*validator_desc=*/"");
}

std::string join(const std::vector<std::string>& values) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += values[i];
  }
  return out;
}

}  // namespace

CLI::Validator int_range(std::string name, std::int64_t min, std::int64_t max) {
  return checker([name = std::move(name), min, max](const std::string& text) {
    const auto v = whole_number(text);
    if (!v) throw OptionError(name + ": '" + text + "' is not a whole number");
    if (*v >= min && *v <= max) return;
    if (max == kIntMax) {
      if (*v < min) throw OptionError(name + " must be >= " + std::to_string(min));
      throw OptionError(name + " must be at most " + std::to_string(max));
    }
    throw OptionError(name + " must be between " + std::to_string(min) + " and " + std::to_string(max));
  });
}

CLI::Validator u64_value(std::string name) {
  return checker([name = std::move(name)](const std::string& text) {
    const auto v = whole_number(text);
    if (!v) throw OptionError(name + ": '" + text + "' is not a whole number");
    if (*v < 0 || *v > __int128(std::numeric_limits<std::uint64_t>::max())) {
      throw OptionError(name + " must be between 0 and " + std::to_string(std::numeric_limits<std::uint64_t>::max()));
    }
  });
}

CLI::Validator real_min(std::string name, RealBound min) {
  return checker([name = std::move(name), min](const std::string& text) {
    const auto v = real_number(text);
    if (!v) throw OptionError(name + ": '" + text + "' is not a number");
    if (!above(*v, min)) throw OptionError(name + " must be " + bound_text(">=", ">", min));
  });
}

CLI::Validator real_range(std::string name, RealBound min, RealBound max) {
  return checker([name = std::move(name), min, max](const std::string& text) {
    const auto v = real_number(text);
    if (!v) throw OptionError(name + ": '" + text + "' is not a number");
    if (!above(*v, min) || !below(*v, max)) {
      throw OptionError(name + " must be " + bound_text(">=", ">", min) + " and " + bound_text("<=", "<", max));
    }
  });
}

CLI::Validator one_of(std::string name, std::vector<std::string> values) {
  return checker([name = std::move(name), values = std::move(values)](const std::string& text) {
    for (const auto& v : values) {
      if (text == v) return;
    }
    throw OptionError(name + " must be one of " + join(values));
  });
}

CLI::Validator one_of(std::string name, const std::vector<int>& values) {
  std::vector<std::string> texts;
  for (const int v : values) texts.push_back(std::to_string(v));
  return one_of(std::move(name), std::move(texts));
}

CLI::Validator byte_size(std::string name) {
  // A transform: "auto" becomes "" (the automatic budget) in the bound string.
  return CLI::Validator(
      [name = std::move(name)](std::string& text) {
        if (text == "auto") {
          text.clear();
          return std::string();
        }
        auto bytes = parse_bytes(text);
        if (!bytes) throw OptionError(name + ": '" + text + "' is not a size (use e.g. 8G, 500M)");
        if (*bytes == 0) throw OptionError(name + " must be above 0 (omit it for the automatic budget)");
        return std::string();
      },
      /*validator_desc=*/"");
}

CLI::Validator byte_size_list(std::string name) {
  return checker([name = std::move(name)](const std::string& text) {
    std::string_view rest = text;
    if (rest.empty()) throw OptionError(name + " needs at least one size (e.g. 500M,2G)");
    while (true) {
      const auto comma = rest.find(',');
      const std::string piece(rest.substr(0, comma));
      auto bytes = parse_bytes(piece);
      if (!bytes || *bytes == 0) throw OptionError(name + ": '" + piece + "' is not a size (use e.g. 500M,2G)");
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  });
}

}  // namespace waste::cli
