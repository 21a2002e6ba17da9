#include "shared/memory/budget_ledger.hpp"

#include <string>

#include "shared/memory/budget.hpp"

namespace waste {

std::uint64_t BudgetLedger::clients_bytes() const noexcept {
  std::uint64_t total = 0;
  for (const auto& [idx, bytes] : clients_) total += bytes;
  return total;
}

std::uint64_t BudgetLedger::client_bytes(int client_idx) const noexcept {
  const auto it = clients_.find(client_idx);
  return it == clients_.end() ? 0 : it->second;
}

Status BudgetLedger::reserve(int client_idx, std::uint64_t state_bytes) {
  if (clients_.contains(client_idx)) {
    return make_error(Errc::argument, "client " + std::to_string(client_idx) + " already holds a reservation");
  }
  const std::uint64_t used = used_bytes();
  if (used > budget_bytes_ || state_bytes > budget_bytes_ - used) {
    return make_error(Errc::ram_budget, "attach refused: budget " + format_bytes(budget_bytes_) + ", used " +
                                            format_bytes(used) + ", requested " + format_bytes(state_bytes));
  }
  clients_.emplace(client_idx, state_bytes);
  return ok();
}

void BudgetLedger::release(int client_idx) noexcept { clients_.erase(client_idx); }

Status BudgetLedger::set_budget(std::uint64_t budget_bytes) {
  if (budget_bytes < used_bytes()) {
    return make_error(Errc::ram_budget, "budget " + format_bytes(budget_bytes) + " is below what is in use (" +
                                            format_bytes(used_bytes()) + ")");
  }
  budget_bytes_ = budget_bytes;
  return ok();
}

}  // namespace waste
