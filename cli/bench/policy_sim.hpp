// `waste bench --policy-sim TRACE`: the daemon's cache policies (ioserver/bench/policy_sim)
// at several capacities on a routing trace, against Belady's optimum; table or JSON.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ioserver/bench/policy_sim.hpp"

namespace waste::cli::bench {

struct CapacitySpec {
  double multiple = 0;      // of the working set ("2x"), or
  std::uint32_t slots = 0;  // a slot count ("416")
};
// "0.5x,1x,416": multiples end in x. Errors name the piece.
Result<std::vector<CapacitySpec>> parse_capacity_list(std::string_view text);
std::vector<CapacitySpec> default_capacities();  // 0.5, 1, 2, 4, 8 x the working set

struct PolicySimArgs {
  std::vector<CapacitySpec> capacities;
  SimHints hints;  // lookahead > 0: also the prefetch comparison
  int clients = 1;  // the trace split among this many interleaved walks (ioserver policy_sim.hpp)
};

// {"working_set": N, "clients": K, "rows": [{"capacity": C, "multiple": M, "policies": {"lru": h, ...}}]}
// (the working set is one client's).
Result<nlohmann::json> run_policy_sim(const RoutingTrace& trace, const PolicySimArgs& args);
std::string policy_sim_table(const nlohmann::json& report);

}  // namespace waste::cli::bench
