#include "shared/ipc/peer_credentials.hpp"

#include <charconv>
#include <limits>

namespace waste::ipc {

namespace {

// The decimal number after the last ':' of `text`; `text` keeps what lies before that ':'.
template <class T>
std::optional<T> pop_field(std::string_view& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view digits = text.substr(colon + 1);
  T value{};
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  text = text.substr(0, colon);
  return value;
}

}  // namespace

std::optional<PeerCredentials> parse_peer_address(std::string_view text) {
  const auto pid = pop_field<int>(text);
  const auto gid = pop_field<std::uint32_t>(text);
  const auto uid = pop_field<std::uint32_t>(text);
  if (!pid || !gid || !uid || *pid <= 0) return std::nullopt;
  return PeerCredentials{*pid, *uid, *gid};
}

}  // namespace waste::ipc
