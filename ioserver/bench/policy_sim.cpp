#include "ioserver/bench/policy_sim.hpp"

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

Status check_run(const RoutingTrace& trace, std::uint32_t capacity, int clients) {
  if (clients < 1 || clients > 64) {
    return make_error(Errc::argument, "clients " + std::to_string(clients) + " is not in 1..64");
  }
  if (int(trace.tokens.size()) < clients) {
    return make_error(Errc::argument, "a trace of " + std::to_string(trace.tokens.size()) + " tokens cannot feed " +
                                          std::to_string(clients) + " clients");
  }
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

std::vector<SimStep> interleaved_walk(const RoutingTrace& trace, int clients) {
  std::vector<SimStep> walk;
  if (clients < 1) return walk;
  const long per_client = long(trace.tokens.size()) / clients;
  const long steps = per_client * trace.n_layers;
  const long behind = trace.n_layers / clients;
  for (long s = 0; s < steps + behind * (clients - 1); ++s) {
    for (int c = 0; c < clients; ++c) {
      const long mine = s - behind * c;
      if (mine < 0 || mine >= steps) continue;
      walk.push_back({c, int(per_client * c + mine / trace.n_layers), int(mine % trace.n_layers)});
    }
  }
  return walk;
}

Result<SimResult> simulate_policy(const RoutingTrace& trace, std::uint32_t capacity, CachePolicy policy,
                                  const SimHints& hints, int clients) {
  WASTE_TRY(check_run(trace, capacity, clients));
  auto slots = std::make_unique<ipc::SlotShm[]>(capacity);
  ExpertCache cache({slots.get(), capacity}, policy);
  cache.set_prefetch_admission(hints.admission);
  SimResult r;
  std::vector<std::uint32_t> pinned;
  for (const SimStep& step : interleaved_walk(trace, clients)) {
    const int t = step.token, l = step.layer;
    for (int e : trace.tokens[std::size_t(t)][std::size_t(l)]) {
      const auto got = cache.demand(ipc::make_key(l, e), step.client);
      ++r.demands;
      if (got.outcome == ExpertCache::Outcome::ready) ++r.hits;
      if (got.outcome == ExpertCache::Outcome::no_victim) {
        return make_error(Errc::argument, "capacity " + std::to_string(capacity) + ": no victim for expert " +
                                              std::to_string(e) + " of layer " + std::to_string(l));
      }
      if (got.outcome == ExpertCache::Outcome::claimed) cache.mark_ready(got.slot);
      cache.pin(got.slot, step.client);
      pinned.push_back(got.slot);
    }
    // The router's lookahead: hints for the next layer while this one is still pinned.
    if (hints.lookahead > 0 && l + 1 < trace.n_layers) {
      for (int e : hinted_ids(trace, t, l + 1, hints)) {
        const auto got = cache.prefetch(ipc::make_key(l + 1, e), step.client);
        if (got.outcome == ExpertCache::Outcome::claimed) {
          cache.mark_ready(got.slot);
          ++r.prefetch_reads;
        }
        if (got.outcome == ExpertCache::Outcome::declined) ++r.prefetch_declined;
      }
    }
    for (std::uint32_t s : pinned) cache.unpin(s, step.client);
    pinned.clear();
  }
  return r;
}

Result<SimResult> simulate_belady(const RoutingTrace& trace, std::uint32_t capacity, int clients) {
  WASTE_TRY(check_run(trace, capacity, clients));
  struct Access {
    std::uint32_t key;
    std::uint64_t next;  // index of the key's next access (max: never)
  };
  std::vector<Access> seq;
  std::vector<std::size_t> layer_start;  // first access index of each step (a client's token, layer)
  for (const SimStep& step : interleaved_walk(trace, clients)) {
    layer_start.push_back(seq.size());
    for (int e : trace.tokens[std::size_t(step.token)][std::size_t(step.layer)]) {
      seq.push_back({ipc::make_key(step.layer, e), 0});
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
