// The API key of `waste serve`: where it comes from (--api-key-file, WASTE_API_KEY, or the
// command line, which warns: /proc/PID/cmdline is readable by every user) and the check of an
// Authorization field against it in constant time.
#pragma once

#include <string>
#include <string_view>

#include "shared/result.hpp"

namespace waste::serve {

inline constexpr std::size_t kMaxApiKeyBytes = 4096;
inline constexpr const char* kApiKeyEnv = "WASTE_API_KEY";

// The key in FILE: its first line without the line end and surrounding blanks. Errors name the
// file: unreadable, empty, over kMaxApiKeyBytes, or holding a control character.
Result<std::string> read_api_key_file(const std::string& path);

// Picks the key: at most one of `file` (path) and `command_line` may be set (else an error
// naming both); with neither, the WASTE_API_KEY environment variable, which is then removed from
// this process's environment (so a daemon it starts does not inherit it). "" = no key.
// `warning` gets the stderr line for a key given on the command line.
Result<std::string> choose_api_key(const std::string& file, const std::string& command_line, std::string& warning);

// True when `authorization` is exactly "Bearer <key>". The time taken depends on the lengths
// only, never on where the first differing byte is.
bool authorization_matches(std::string_view authorization, std::string_view key);

}  // namespace waste::serve
