// The `echo` cache policy's predictor (docs/design/daemon.md "Cache policy"; measured in
// docs/LEARNED.md, issue 15): a token whose routing so far matches past tokens' tends to repeat
// them, so the tokens that followed those past tokens say what the next token will read.
//
// For the current token, every demand adds one to the match count of each past token (in a
// window of kWindow tokens) that read the same record; the kTop best-matched past tokens (ties
// to the most recent) vote. A record of a layer still ahead in this token is predicted with the
// fraction of the matches that read it; one of a layer already passed (its next chance is the
// next token) with the fraction of the matches' successors that read it. Learned only from the
// run's own past; no offline tables.
//
// Memory is fixed at construction: per remembered key a bitset of the window's tokens; keys
// beyond `keys` are not remembered (never predicted), never a failure. Daemon-private; not
// thread-safe (the cache mutex covers it).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace waste {

class RoutingEcho {
 public:
  static constexpr std::uint32_t kWindow = 512;  // tokens remembered (bits per key)
  static constexpr int kTop = 4;                 // best-matched past tokens that vote

  explicit RoutingEcho(std::uint32_t keys);

  // A demand of `key` in token `epoch` (epochs never go back; a new one starts a new match).
  void note_demand(std::uint32_t key, std::uint32_t epoch);
  // Fraction of the best matches that read `key` (a record of a layer still ahead in this
  // token); nullopt before any past token matched.
  [[nodiscard]] std::optional<double> vote_this_token(std::uint32_t key) const;
  // Fraction of the best matches' successors that read `key` (the next token's guess); nullopt
  // when no match has a successor in the window.
  [[nodiscard]] std::optional<double> vote_next_token(std::uint32_t key) const;

 private:
  static constexpr std::uint32_t kWords = kWindow / 64;
  static constexpr std::uint32_t kNoKey = 0xFFFFFFFFu;
  using Bits = std::array<std::uint64_t, kWords>;

  [[nodiscard]] const Bits* find(std::uint32_t key) const;
  Bits* find_or_add(std::uint32_t key);
  [[nodiscard]] bool read_by(const Bits& b, std::uint32_t token) const {
    const std::uint32_t i = token % kWindow;
    return (b[i / 64] >> (i % 64)) & 1u;
  }
  void start_token(std::uint32_t epoch);
  void rank();

  std::vector<std::uint32_t> keys_;  // open addressing, linear probing, never erased
  std::vector<Bits> bits_;           // per key: bit (token % kWindow) set when the token read it
  std::uint32_t mask_ = 0;
  std::uint32_t size_ = 0;
  std::uint32_t limit_ = 0;
  std::uint32_t epoch_ = 0;
  bool started_ = false;
  std::vector<std::uint32_t> match_;  // per window position: matches of that past token with this one
  std::array<std::uint32_t, kTop> top_{};
  int n_top_ = 0;
};

}  // namespace waste
