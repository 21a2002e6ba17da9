#include "compute/tokenizer/bpe.hpp"

#include <limits>
#include <queue>

namespace waste::tokenizer {
namespace {

constexpr int kNoRank = std::numeric_limits<int>::max();
// Above this piece length the heap loop wins over the quadratic scan.
constexpr std::size_t kHeapThresholdBytes = 128;

}  // namespace

BytePairEncoder::BytePairEncoder(const std::vector<RankEntry>& entries) {
  ranks_.reserve(entries.size());
  for (const RankEntry& e : entries) ranks_.emplace(e.bytes, e.rank);
}

int BytePairEncoder::rank_of(std::string_view bytes) const noexcept {
  const auto it = ranks_.find(bytes);
  return it == ranks_.end() ? -1 : it->second;
}

bool BytePairEncoder::encode_piece(std::string_view piece, std::vector<int>& ids) const {
  if (piece.empty()) return true;
  if (const int whole = rank_of(piece); whole >= 0) {
    ids.push_back(whole);
    return true;
  }
  return piece.size() > kHeapThresholdBytes ? merge_heap(piece, ids) : merge_quadratic(piece, ids);
}

bool BytePairEncoder::merge_quadratic(std::string_view piece, std::vector<int>& ids) const {
  // starts[i] = first byte of part i (plus a sentinel at the end); pair_rank[i] = rank of
  // parts i and i+1 joined, as in tiktoken's byte_pair_merge.
  std::vector<std::size_t> starts(piece.size() + 1);
  for (std::size_t i = 0; i <= piece.size(); ++i) starts[i] = i;
  const auto joined_rank = [&](std::size_t i) {
    if (i + 2 >= starts.size()) return kNoRank;
    const int r = rank_of(piece.substr(starts[i], starts[i + 2] - starts[i]));
    return r < 0 ? kNoRank : r;
  };
  std::vector<int> pair_rank(starts.size());
  for (std::size_t i = 0; i < pair_rank.size(); ++i) pair_rank[i] = joined_rank(i);
  while (starts.size() > 2) {
    std::size_t best = 0;
    int best_rank = kNoRank;
    for (std::size_t i = 0; i + 2 < starts.size(); ++i) {
      if (pair_rank[i] < best_rank) {
        best_rank = pair_rank[i];
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    starts.erase(starts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    pair_rank.erase(pair_rank.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    pair_rank[best] = joined_rank(best);
    if (best > 0) pair_rank[best - 1] = joined_rank(best - 1);
  }
  const std::size_t first = ids.size();
  for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
    const int r = rank_of(piece.substr(starts[i], starts[i + 1] - starts[i]));
    if (r < 0) {
      ids.resize(first);
      return false;
    }
    ids.push_back(r);
  }
  return true;
}

bool BytePairEncoder::merge_heap(std::string_view piece, std::vector<int>& ids) const {
  // Parts form a doubly linked list over byte offsets; a part is named by its first byte, which
  // never changes while it lives. Heap entries (rank, left part) go stale when either side
  // merges; a stale entry is recognised by the recorded right neighbour or part end no longer
  // matching. (rank, position) order reproduces "lowest rank, leftmost on ties" exactly.
  const std::size_t n = piece.size();
  std::vector<std::size_t> next(n), prev(n), end(n);
  std::vector<bool> alive(n, true);
  for (std::size_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i == 0 ? n : i - 1;  // n = none
    end[i] = i + 1;
  }
  struct Candidate {
    int rank;
    std::size_t left;
    std::size_t right_end;  // end of the right part when the entry was made
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push_pair = [&](std::size_t left) {
    if (left >= n || next[left] >= n) return;
    const std::size_t right = next[left];
    const int r = rank_of(piece.substr(left, end[right] - left));
    if (r >= 0) heap.push(Candidate{r, left, end[right]});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || next[c.left] >= n || end[next[c.left]] != c.right_end) continue;
    const std::size_t right = next[c.left];
    end[c.left] = end[right];
    alive[right] = false;
    next[c.left] = next[right];
    if (next[right] < n) prev[next[right]] = c.left;
    if (prev[c.left] < n) push_pair(prev[c.left]);
    push_pair(c.left);
  }
  const std::size_t first = ids.size();
  for (std::size_t i = 0; i < n; i = next[i]) {
    const int r = rank_of(piece.substr(i, end[i] - i));
    if (r < 0) {
      ids.resize(first);
      return false;
    }
    ids.push_back(r);
  }
  return true;
}

}  // namespace waste::tokenizer

