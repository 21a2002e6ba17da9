#include "cli/serve/api_key.hpp"

#include <cstdlib>
#include <fstream>
#include <algorithm>

namespace waste::serve {

Result<std::string> read_api_key_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::io, "--api-key-file " + path + ": cannot be read");
  std::string text;
  text.resize(kMaxApiKeyBytes + 1);
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(std::size_t(in.gcount()));
  if (text.size() > kMaxApiKeyBytes) {
    return make_error(Errc::argument,
                      "--api-key-file " + path + ": over " + std::to_string(kMaxApiKeyBytes) + " bytes (a key is one line)");
  }
  text = text.substr(0, text.find('\n'));
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!text.empty() && blank(text.back())) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && blank(text[start])) ++start;
  text.erase(0, start);
  if (text.empty()) return make_error(Errc::argument, "--api-key-file " + path + ": the file holds no key");
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      return make_error(Errc::argument, "--api-key-file " + path + ": the key holds a control character");
    }
  }
  return text;
}

Result<std::string> choose_api_key(const std::string& file, const std::string& command_line, std::string& warning) {
  if (!file.empty() && !command_line.empty()) {
    return make_error(Errc::argument, "--api-key and --api-key-file: give the key one way");
  }
  if (!file.empty()) return read_api_key_file(file);
  if (!command_line.empty()) {
    warning = "waste serve: warning: --api-key puts the key in /proc/PID/cmdline, readable by every user of this "
              "machine; use --api-key-file FILE or the " + std::string(kApiKeyEnv) + " environment variable";
    return command_line;
  }
  const char* env = std::getenv(kApiKeyEnv);
  std::string key = env ? env : "";
  ::unsetenv(kApiKeyEnv);
  if (env && key.empty()) return make_error(Errc::argument, std::string(kApiKeyEnv) + " is set but empty");
  return key;
}

bool authorization_matches(std::string_view authorization, std::string_view key) {
  static constexpr std::string_view kScheme = "Bearer ";
  // Every byte of the longer side is looked at whatever the others hold.
  const std::size_t expected = kScheme.size() + key.size();
  unsigned diff = authorization.size() == expected ? 0u : 1u;
  const std::size_t n = std::max(authorization.size(), expected);
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char want = i < kScheme.size() ? kScheme[i] : (i < expected ? key[i - kScheme.size()] : 0);
    const unsigned char got = i < authorization.size() ? authorization[i] : 0;
    diff |= unsigned(want ^ got);
  }
  // Keep the compiler from turning the loop into an early exit.
  volatile unsigned result = diff;
  return result == 0 && !key.empty();
}

}  // namespace waste::serve
