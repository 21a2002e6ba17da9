#include "cli/bench/policy_sim.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace waste::cli::bench {

Result<std::vector<CapacitySpec>> parse_capacity_list(std::string_view text) {
  std::vector<CapacitySpec> out;
  while (true) {
    const auto comma = text.find(',');
    const std::string piece(text.substr(0, comma));
    auto bad = [&] {
      return make_error(Errc::argument, "--capacity: '" + piece +
                                            "' is neither a slot count (416) nor a multiple of the working set (0.5x)");
    };
    CapacitySpec c;
    if (!piece.empty() && piece.back() == 'x') {
      const char* end = piece.data() + piece.size() - 1;
      const auto [p, ec] = std::from_chars(piece.data(), end, c.multiple);
      if (ec != std::errc() || p != end || !(c.multiple > 0) || c.multiple > 1e6) return bad();
    } else {
      const auto [p, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), c.slots);
      if (ec != std::errc() || p != piece.data() + piece.size() || c.slots == 0) return bad();
    }
    out.push_back(c);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

std::vector<CapacitySpec> default_capacities() { return {{0.5, 0}, {1, 0}, {2, 0}, {4, 0}, {8, 0}}; }

Result<nlohmann::json> run_policy_sim(const RoutingTrace& trace, const PolicySimArgs& args) {
  const std::uint32_t ws = trace.working_set();
  const std::size_t clients = std::size_t(std::max(args.clients, 1));
  const double tokens = double(trace.tokens.size() / clients * clients);  // the tokens the clients walk
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& spec : args.capacities) {
    const auto capacity = spec.slots ? spec.slots : std::uint32_t(std::llround(spec.multiple * ws));
    nlohmann::json policies = nlohmann::json::object();
    for (CachePolicy p : {CachePolicy::lru, CachePolicy::lfru, CachePolicy::reuse, CachePolicy::echo}) {
      auto r = simulate_policy(trace, capacity, p, {}, args.clients);
      if (!r) return std::unexpected(r.error());
      policies[cache_policy_name(p)] = r->hit_rate();
      if (p == kDefaultCachePolicy) policies["default"] = r->hit_rate();
    }
    auto best = simulate_belady(trace, capacity, args.clients);
    if (!best) return std::unexpected(best.error());
    policies["belady"] = best->hit_rate();
    nlohmann::json row = {{"capacity", capacity}, {"multiple", double(capacity) / double(ws)}, {"policies", policies}};
    if (args.hints.lookahead > 0) {
      // Speculative prefetch from the trace: demand hit rate and disk reads per token.
      nlohmann::json pf = nlohmann::json::object();
      struct Variant {
        const char* name;
        CachePolicy policy;
        bool admission;
      };
      for (const Variant v : {Variant{"lru", CachePolicy::lru, true}, Variant{"lfru", CachePolicy::lfru, true},
                              Variant{"reuse", CachePolicy::reuse, true},
                              Variant{"reuse_admit_all", CachePolicy::reuse, false},
                              Variant{"echo", CachePolicy::echo, true},
                              Variant{"echo_admit_all", CachePolicy::echo, false}}) {
        SimHints h = args.hints;
        h.admission = v.admission;
        auto r = simulate_policy(trace, capacity, v.policy, h, args.clients);
        if (!r) return std::unexpected(r.error());
        pf[v.name] = {{"hit_rate", r->hit_rate()},
                      {"reads_per_token", double(r->reads()) / tokens},
                      {"prefetch_reads", r->prefetch_reads},
                      {"prefetch_declined", r->prefetch_declined}};
      }
      row["prefetch"] = pf;
    }
    rows.push_back(row);
  }
  return nlohmann::json{{"working_set", ws}, {"clients", args.clients}, {"rows", rows}};
}

std::string policy_sim_table(const nlohmann::json& report) {
  std::string out = "working set " + std::to_string(report["working_set"].get<std::uint32_t>()) +
                    " records (top_k x layers); hit rate of demands\n";
  if (const int clients = report.value("clients", 1); clients > 1) {
    out += std::to_string(clients) + " clients, each a run of the trace's tokens, their walks " +
           "interleaved layer by layer and spread through the pass\n";
  }
  char line[256];
  std::snprintf(line, sizeof line, "%9s %8s %8s %8s %8s %8s %8s %8s\n", "capacity", "multiple", "lru", "lfru",
                "reuse", "echo", "default", "belady");
  out += line;
  for (const auto& row : report["rows"]) {
    const auto& p = row["policies"];
    std::snprintf(line, sizeof line, "%9u %8.2f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n", row["capacity"].get<unsigned>(),
                  row["multiple"].get<double>(), p["lru"].get<double>(), p["lfru"].get<double>(),
                  p["reuse"].get<double>(), p["echo"].get<double>(), p["default"].get<double>(),
                  p["belady"].get<double>());
    out += line;
  }
  if (!report["rows"].empty() && report["rows"][0].contains("prefetch")) {
    out += "\nwith the lookahead's prefetch: hit rate / disk reads per token (declined prefetches)\n";
    std::snprintf(line, sizeof line, "%9s %24s %24s %24s %24s %24s %24s\n", "capacity", "lru", "lfru", "reuse",
                  "reuse_admit_all", "echo", "echo_admit_all");
    out += line;
    for (const auto& row : report["rows"]) {
      std::string cells;
      for (const char* name : {"lru", "lfru", "reuse", "reuse_admit_all", "echo", "echo_admit_all"}) {
        const auto& v = row["prefetch"][name];
        char cell[64];
        std::snprintf(cell, sizeof cell, " %8.3f/%6.1f (%6llu)", v["hit_rate"].get<double>(),
                      v["reads_per_token"].get<double>(),
                      static_cast<unsigned long long>(v["prefetch_declined"].get<std::uint64_t>()));
        cells += cell;
      }
      std::snprintf(line, sizeof line, "%9u%s\n", row["capacity"].get<unsigned>(), cells.c_str());
      out += line;
    }
  }
  return out;
}

}  // namespace waste::cli::bench
