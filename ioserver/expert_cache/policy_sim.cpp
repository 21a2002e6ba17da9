#include "ioserver/expert_cache/policy_sim.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "ioserver/expert_cache/expert_cache.hpp"

namespace waste {

Result<RoutingTrace> parse_routing_trace(std::string_view text) {
  RoutingTrace trace;
  std::istringstream in{std::string(text)};
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto bad = [&](const std::string& why) {
      return make_error(Errc::format, "routing trace line " + std::to_string(line_no) + ": " + why);
    };
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    const auto layers = j.find("layers");
    if (layers == j.end() || !layers->is_array() || layers->empty()) return bad("no \"layers\" array");
    std::vector<std::vector<int>> token;
    for (const auto& ids : *layers) {
      if (!ids.is_array() || ids.empty()) return bad("a layer is not a non-empty array of expert ids");
      std::vector<int> row;
      for (const auto& id : ids) {
        if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > ipc::kMaxExperts) {
          return bad("expert id " + id.dump() + " is not an integer in 0.." + std::to_string(ipc::kMaxExperts));
        }
        row.push_back(id.get<int>());
      }
      trace.top_k = std::max(trace.top_k, int(row.size()));
      for (int id : row) trace.n_experts = std::max(trace.n_experts, id + 1);
      token.push_back(std::move(row));
    }
    if (!trace.tokens.empty() && int(token.size()) != trace.n_layers) {
      return bad(std::to_string(token.size()) + " layers where the first token has " + std::to_string(trace.n_layers));
    }
    if (token.size() > 256) return bad(std::to_string(token.size()) + " layers (at most 256)");
    trace.n_layers = int(token.size());
    trace.tokens.push_back(std::move(token));
  }
  if (trace.tokens.empty()) return make_error(Errc::format, "routing trace: no tokens");
  return trace;
}

namespace {

Status check_capacity(const RoutingTrace& trace, std::uint32_t capacity) {
  if (capacity < std::uint32_t(trace.top_k)) {
    return make_error(Errc::argument, "capacity " + std::to_string(capacity) + " is below one layer's " +
                                          std::to_string(trace.top_k) + " experts (they are pinned together)");
  }
  return ok();
}

std::vector<int> hinted_ids(const RoutingTrace& trace, int token, int layer, const SimHints& h) {
  const auto& real = trace.tokens[std::size_t(token)][std::size_t(layer)];
  std::vector<int> ids;
  const int right = std::min<int>(h.lookahead - h.wrong, int(real.size()));
  for (int i = 0; i < right; ++i) ids.push_back(real[std::size_t(i)]);
  // Wrong guesses: a deterministic spread of ids the layer does not use.
  for (int j = 0, v = (layer * 31 + token * 17) % trace.n_experts; j < h.wrong && trace.n_experts > int(real.size());) {
    v = (v + 97) % trace.n_experts;
    if (std::find(real.begin(), real.end(), v) == real.end() && std::find(ids.begin(), ids.end(), v) == ids.end()) {
      ids.push_back(v);
      ++j;
    }
  }
  return ids;
}

}  // namespace

Result<SimResult> simulate_policy(const RoutingTrace& trace, std::uint32_t capacity, CachePolicy policy,
                                  const SimHints& hints) {
  WASTE_TRY(check_capacity(trace, capacity));
  auto slots = std::make_unique<ipc::SlotShm[]>(capacity);
  ExpertCache cache({slots.get(), capacity}, policy);
  cache.set_prefetch_admission(hints.admission);
  SimResult r;
  std::vector<std::uint32_t> pinned;
  for (int t = 0; t < int(trace.tokens.size()); ++t) {
    for (int l = 0; l < trace.n_layers; ++l) {
      for (int e : trace.tokens[std::size_t(t)][std::size_t(l)]) {
        const auto got = cache.demand(ipc::make_key(l, e));
        ++r.demands;
        if (got.outcome == ExpertCache::Outcome::ready) ++r.hits;
        if (got.outcome == ExpertCache::Outcome::no_victim) {
          return make_error(Errc::argument, "capacity " + std::to_string(capacity) + ": no victim for expert " +
                                                std::to_string(e) + " of layer " + std::to_string(l));
        }
        if (got.outcome == ExpertCache::Outcome::claimed) cache.mark_ready(got.slot);
        cache.pin(got.slot, 0);
        pinned.push_back(got.slot);
      }
      // The router's lookahead: hints for the next layer while this one is still pinned.
      if (hints.lookahead > 0 && l + 1 < trace.n_layers) {
        for (int e : hinted_ids(trace, t, l + 1, hints)) {
          const auto got = cache.prefetch(ipc::make_key(l + 1, e));
          if (got.outcome == ExpertCache::Outcome::claimed) {
            cache.mark_ready(got.slot);
            ++r.prefetch_reads;
          }
          if (got.outcome == ExpertCache::Outcome::declined) ++r.prefetch_declined;
        }
      }
      for (std::uint32_t s : pinned) cache.unpin(s, 0);
      pinned.clear();
    }
  }
  return r;
}

Result<SimResult> simulate_belady(const RoutingTrace& trace, std::uint32_t capacity) {
  WASTE_TRY(check_capacity(trace, capacity));
  struct Access {
    std::uint32_t key;
    std::uint64_t next;  // index of the key's next access (max: never)
  };
  std::vector<Access> seq;
  std::vector<std::size_t> layer_start;  // first access index of each (token, layer)
  for (const auto& token : trace.tokens) {
    for (int l = 0; l < trace.n_layers; ++l) {
      layer_start.push_back(seq.size());
      for (int e : token[std::size_t(l)]) seq.push_back({ipc::make_key(l, e), 0});
    }
  }
  constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();
  std::unordered_map<std::uint32_t, std::uint64_t> upcoming;
  for (std::size_t i = seq.size(); i-- > 0;) {
    const auto it = upcoming.find(seq[i].key);
    seq[i].next = it == upcoming.end() ? kNever : it->second;
    upcoming[seq[i].key] = i;
  }
  SimResult r;
  std::unordered_map<std::uint32_t, std::uint64_t> resident;  // key -> next use
  std::set<std::pair<std::uint64_t, std::uint32_t>> by_next;   // (next use, key)
  std::size_t layer = 0;
  for (std::size_t i = 0; i < seq.size(); ++i) {
    while (layer + 1 < layer_start.size() && layer_start[layer + 1] <= i) ++layer;
    const std::size_t first = layer_start[layer];  // this layer's accesses [first, i) are pinned
    ++r.demands;
    const std::uint32_t key = seq[i].key;
    if (const auto it = resident.find(key); it != resident.end()) {
      ++r.hits;
      by_next.erase({it->second, key});
    } else if (resident.size() >= capacity) {
      // Farthest next use among records this layer has not pinned.
      for (auto v = by_next.rbegin(); v != by_next.rend(); ++v) {
        bool pinned = false;
        for (std::size_t k = first; k < i && !pinned; ++k) pinned = seq[k].key == v->second;
        if (pinned) continue;
        resident.erase(v->second);
        by_next.erase(std::next(v).base());
        break;
      }
    }
    resident[key] = seq[i].next;
    by_next.insert({seq[i].next, key});
  }
  return r;
}

}  // namespace waste
