#include "shared/memory/budget.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <string>

namespace waste {

WorkingSets floor_plus_working_sets(std::uint64_t floor_bytes, std::uint64_t working_set_bytes,
                                    std::uint64_t room_bytes) noexcept {
  for (int k = 3; k >= 1; --k) {
    const std::uint64_t candidate = floor_bytes + working_set_bytes * std::uint64_t(k);
    if (candidate <= room_bytes) return {candidate, k};
  }
  return {floor_bytes, 0};
}

std::uint64_t whole_expert_set_budget(const MemoryPlan& plan) noexcept {
  if (plan.expert_records == 0 || plan.max_record_bytes == 0) return 0;
  const std::uint64_t records = plan.expert_records * plan.max_record_bytes;
  const std::uint64_t min_cache = std::min(plan.min_expert_cache_bytes, plan.floor_bytes);
  return plan.floor_bytes - min_cache + std::max(records, min_cache);
}

AutomaticBudget automatic_budget(std::uint64_t floor_bytes, std::uint64_t working_set_bytes,
                                 std::uint64_t whole_set_bytes, std::uint64_t room_bytes) noexcept {
  if (whole_set_bytes != 0 && whole_set_bytes <= room_bytes) return {whole_set_bytes, 0, true};
  const auto sets = floor_plus_working_sets(floor_bytes, working_set_bytes, room_bytes);
  return {sets.bytes, sets.count, false};
}

Result<BudgetChoice> resolve_budget(const MemoryPlan& plan, std::optional<std::uint64_t> requested_bytes,
                                    std::uint64_t cap_bytes) {
  BudgetChoice choice;
  if (requested_bytes && *requested_bytes > 0) {
    if (*requested_bytes < plan.floor_bytes) {
      return make_error(Errc::ram_budget, "budget " + format_bytes(*requested_bytes) + " is below the floor " +
                                              format_bytes(plan.floor_bytes) + " for this model");
    }
    choice.budget_bytes = *requested_bytes;
    choice.explicit_budget = true;
  } else {
    // Filling the cap walks into the paging cliff (waste-lessons.md §1.4): the whole expert set
    // (nothing is ever evicted) or whole working sets only. An unknown cap never takes the whole set.
    const auto pick = automatic_budget(plan.floor_bytes, plan.working_set_bytes,
                                       cap_bytes == 0 ? 0 : whole_expert_set_budget(plan),
                                       cap_bytes == 0 ? UINT64_MAX : cap_bytes);
    choice.budget_bytes = pick.bytes;
    choice.working_sets = pick.working_sets;
    choice.whole_expert_set = pick.whole_expert_set;
  }
  choice.above_cap = cap_bytes != 0 && choice.budget_bytes > cap_bytes;
  return choice;
}

std::uint64_t expert_cache_bytes(const MemoryPlan& plan, std::uint64_t budget_bytes) noexcept {
  if (budget_bytes < plan.floor_bytes) return 0;
  return budget_bytes - plan.floor_bytes + plan.min_expert_cache_bytes;
}

std::uint64_t arena_slots(const MemoryPlan& plan, std::uint64_t budget_bytes) noexcept {
  if (plan.max_record_bytes == 0) return 0;
  return expert_cache_bytes(plan, budget_bytes) / plan.max_record_bytes;
}

bool embedding_resident(const MemoryPlan& plan, std::uint64_t budget_bytes) noexcept {
  return plan.embed_bytes > 0 && budget_bytes >= plan.recommended_bytes + plan.embed_bytes;
}

std::string format_bytes(std::uint64_t bytes) {
  char buf[64];
  const double b = double(bytes);
  if (bytes >= (1ULL << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GB", b / double(1ULL << 30));
  } else if (bytes >= (1ULL << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MB", b / double(1ULL << 20));
  } else if (bytes >= (1ULL << 10)) {
    std::snprintf(buf, sizeof buf, "%.1f KB", b / double(1ULL << 10));
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

Result<std::uint64_t> parse_bytes(std::string_view text) {
  const auto bad = [&] { return make_error(Errc::argument, "not a byte size: '" + std::string(text) + "' (use e.g. 8G, 500M, 123456)"); };
  std::string s(text);
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(s, &pos);
  } catch (...) {
    return bad();
  }
  if (!std::isfinite(value) || value < 0 || s.empty() || s[0] == '-' || s[0] == '+' || std::isspace((unsigned char)s[0])) return bad();
  std::string unit = s.substr(pos);
  for (char& c : unit) c = char(std::toupper((unsigned char)c));
  std::uint64_t mul = 1;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mul = 1ULL << 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mul = 1ULL << 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mul = 1ULL << 30;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mul = 1ULL << 40;
  else return bad();
  const double bytes = value * double(mul);
  if (bytes >= 18446744073709551616.0) return bad();
  return std::uint64_t(bytes);
}

}  // namespace waste
