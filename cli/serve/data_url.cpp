#include "cli/serve/data_url.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace waste::serve {
namespace {

constexpr std::string_view kAccepted = "only data: URLs are accepted (data:image/png;base64,... or data:image/jpeg;base64,...)";

std::unexpected<ApiError> fail(const std::string& param, const std::string& why) {
  return std::unexpected(bad_param(param, "'" + param + "' " + why));
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), s.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
         });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The standard alphabet (RFC 4648 §4); -1 = not in it.
constexpr std::array<int, 256> kDecode = [] {
  std::array<int, 256> t{};
  t.fill(-1);
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = i;
  return t;
}();

}  // namespace

std::expected<std::vector<std::uint8_t>, ApiError> decode_data_url(std::string_view url, const std::string& param,
                                                                   std::uint64_t max_bytes) {
  if (!starts_with_nocase(url, "data:")) {
    if (starts_with_nocase(url, "http://") || starts_with_nocase(url, "https://")) {
      return fail(param, "is a remote URL; " + std::string(kAccepted) + ": this server fetches nothing");
    }
    if (starts_with_nocase(url, "file:") || url.starts_with('/') || url.starts_with("./") || url.starts_with("../") ||
        url.starts_with('~')) {
      return fail(param, "is a local path; " + std::string(kAccepted) + ": this server reads no file a request names");
    }
    return fail(param, "is not a data: URL; " + std::string(kAccepted));
  }
  const std::string_view rest = url.substr(5);
  const std::size_t comma = rest.find(',');
  if (comma == std::string_view::npos) return fail(param, "is a data: URL without the ',' before its data");
  // Metadata: the media type, optional parameters, ";base64" last.
  const std::string meta = lower(rest.substr(0, comma));
  const std::string_view data = rest.substr(comma + 1);
  const std::string type = meta.substr(0, meta.find(';'));
  if (type != "image/png" && type != "image/jpeg") {
    return fail(param, "has media type \"" + type + "\"; only image/png and image/jpeg are accepted");
  }
  if (!meta.ends_with(";base64")) return fail(param, "must hold base64 data (data:" + type + ";base64,...)");

  // Padding only at the end; unpadded lengths are accepted (a remainder of 1 is never valid).
  std::size_t end = data.size();
  while (end > 0 && data.size() - end < 2 && data[end - 1] == '=') --end;
  if (end == 0) return fail(param, "holds no image data");
  const std::uint64_t decoded = std::uint64_t(end) / 4 * 3 + (end % 4 == 0 ? 0 : end % 4 - 1);
  if (decoded > max_bytes) {
    return fail(param, "holds " + std::to_string(decoded) + " bytes of image data; the limit is " +
                           std::to_string(max_bytes) + " bytes");
  }
  const bool padded = end != data.size();
  if (end % 4 == 1 || (padded && data.size() % 4 != 0)) return fail(param, "is not valid base64 (its length)");
  std::vector<std::uint8_t> out;
  out.reserve(std::size_t(decoded));
  std::uint32_t acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < end; ++i) {
    const int v = kDecode[static_cast<unsigned char>(data[i])];
    if (v < 0) return fail(param, "is not valid base64 (character " + std::to_string(i) + " of the data)");
    acc = (acc << 6) | std::uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(std::uint8_t(acc >> bits));
      acc &= (1u << bits) - 1;
    }
  }
  return out;
}

}  // namespace waste::serve
