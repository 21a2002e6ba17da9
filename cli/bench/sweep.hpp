// `waste bench --sweep 500M,1G,...`: the standard workload once per budget, each in a fresh
// process (a cold expert cache; page cache dropped first when --drop-caches and allowed), then
// a markdown table and a gnuplot PNG of decode tok/s and hit rate against the budget.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/result.hpp"

namespace waste::cli::bench {

struct SweepPoint {
  std::string budget;          // as given ("500M")
  std::uint64_t budget_bytes = 0;
  nlohmann::json report;       // the child's bench --json document
  bool page_cache_dropped = false;
};

struct SweepArgs {
  std::string model;
  std::vector<std::string> budgets;
  std::vector<std::string> child_args;   // workload options passed to each child
  bool drop_caches = false;
};

// "500M,1G,2G" -> pieces; each must parse as a byte size.
Result<std::vector<std::string>> parse_budget_list(const std::string& text);

Result<std::vector<SweepPoint>> run_sweep(const SweepArgs& args);
std::string sweep_markdown(const std::vector<SweepPoint>& points);
nlohmann::json sweep_json(const std::vector<SweepPoint>& points);
// Writes a gnuplot script and data next to `png` and runs gnuplot. Errc::io names the failure.
Status plot_sweep(const std::vector<SweepPoint>& points, const std::string& png, const std::string& title);

}  // namespace waste::cli::bench
