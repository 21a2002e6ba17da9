#include "ioserver/expert_cache/routing_echo.hpp"

#include <algorithm>

#include "ioserver/expert_cache/key_hash.hpp"

namespace waste {

RoutingEcho::RoutingEcho(std::uint32_t keys) : limit_(keys), match_(kWindow, 0) {
  std::uint32_t cap = 16;
  while (cap < 2 * keys) cap <<= 1;
  keys_.assign(cap, kNoKey);
  bits_.assign(cap, Bits{});
  mask_ = cap - 1;
}

const RoutingEcho::Bits* RoutingEcho::find(std::uint32_t key) const {
  for (std::uint32_t i = key_bucket(key, mask_);; i = (i + 1) & mask_) {
    if (keys_[i] == key) return &bits_[i];
    if (keys_[i] == kNoKey) return nullptr;
  }
}

RoutingEcho::Bits* RoutingEcho::find_or_add(std::uint32_t key) {
  for (std::uint32_t i = key_bucket(key, mask_);; i = (i + 1) & mask_) {
    if (keys_[i] == key) return &bits_[i];
    if (keys_[i] == kNoKey) {
      if (size_ >= limit_) return nullptr;  // full: forget rather than grow
      keys_[i] = key;
      ++size_;
      return &bits_[i];
    }
  }
}

void RoutingEcho::start_token(std::uint32_t epoch) {
  // Tokens skipped over (none in a walk, but epochs are the caller's) and the new one: their
  // window positions now belong to tokens that read nothing yet.
  const std::uint32_t from = started_ ? epoch_ + 1 : epoch;
  for (std::uint32_t t = from; t <= epoch && t - from < kWindow; ++t) {
    const std::uint32_t i = t % kWindow;
    for (std::uint32_t k = 0; k <= mask_; ++k) {
      if (keys_[k] != kNoKey) bits_[k][i / 64] &= ~(std::uint64_t{1} << (i % 64));
    }
  }
  epoch_ = epoch;
  started_ = true;
  match_.assign(kWindow, 0);
  n_top_ = 0;
}

void RoutingEcho::note_demand(std::uint32_t key, std::uint32_t epoch) {
  if (!started_ || epoch != epoch_) start_token(epoch);
  Bits* b = find_or_add(key);
  if (!b || read_by(*b, epoch_)) return;  // a second read in the token adds nothing
  const std::uint32_t oldest = epoch_ >= kWindow - 1 ? epoch_ - (kWindow - 1) : 0;
  for (std::uint32_t t = oldest; t < epoch_; ++t) {
    if (read_by(*b, t)) ++match_[t % kWindow];
  }
  const std::uint32_t i = epoch_ % kWindow;
  (*b)[i / 64] |= std::uint64_t{1} << (i % 64);
  rank();
}

void RoutingEcho::rank() {
  // The kTop past tokens with the most matches, ties to the most recent (scan newest first).
  n_top_ = 0;
  const std::uint32_t oldest = epoch_ >= kWindow - 1 ? epoch_ - (kWindow - 1) : 0;
  for (std::uint32_t t = epoch_; t-- > oldest;) {
    const std::uint32_t m = match_[t % kWindow];
    int at = n_top_;
    while (at > 0 && match_[top_[std::size_t(at - 1)] % kWindow] < m) --at;
    if (at >= kTop) continue;
    for (int j = std::min(n_top_, kTop - 1); j > at; --j) top_[std::size_t(j)] = top_[std::size_t(j - 1)];
    top_[std::size_t(at)] = t;
    if (n_top_ < kTop) ++n_top_;
  }
}

std::optional<double> RoutingEcho::vote_this_token(std::uint32_t key) const {
  if (n_top_ == 0) return std::nullopt;
  const Bits* b = find(key);
  int votes = 0;
  for (int j = 0; j < n_top_; ++j) votes += b && read_by(*b, top_[std::size_t(j)]) ? 1 : 0;
  return double(votes) / double(n_top_);
}

std::optional<double> RoutingEcho::vote_next_token(std::uint32_t key) const {
  const Bits* b = find(key);
  int votes = 0;
  int voters = 0;
  for (int j = 0; j < n_top_; ++j) {
    const std::uint32_t next = top_[std::size_t(j)] + 1;
    if (next >= epoch_) continue;  // the match's successor is the current token
    ++voters;
    votes += b && read_by(*b, next) ? 1 : 0;
  }
  if (voters == 0) return std::nullopt;
  return double(votes) / double(voters);
}

}  // namespace waste
