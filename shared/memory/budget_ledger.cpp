#include "shared/memory/budget_ledger.hpp"

#include <algorithm>
#include <string>

#include "shared/memory/budget.hpp"

namespace waste {

BudgetLedger::BudgetLedger(LedgerShape shape) : shape_(std::move(shape)) {
  shape_.floor_slots = std::min(shape_.floor_slots, shape_.max_slots);
  const std::int64_t fit = slots_for(shape_.budget_bytes, 0);
  usable_slots_ = fit < 0 ? 0 : std::uint64_t(fit);
}

std::uint64_t BudgetLedger::clients_bytes() const noexcept {
  std::uint64_t total = 0;
  for (const auto& [idx, c] : clients_) total += c.state_bytes;
  return total;
}

std::uint64_t BudgetLedger::client_bytes(int client_idx) const noexcept {
  const auto it = clients_.find(client_idx);
  return it == clients_.end() ? 0 : it->second.state_bytes;
}

std::int64_t BudgetLedger::slots_for(std::uint64_t budget, std::uint64_t state_bytes) const noexcept {
  const std::uint64_t fixed = shape_.trunk_bytes + state_bytes;
  if (fixed > budget) return -1;
  if (shape_.record_bytes == 0) return std::int64_t(shape_.max_slots);
  return std::int64_t(std::min<std::uint64_t>(shape_.max_slots, (budget - fixed) / shape_.record_bytes));
}

Status BudgetLedger::can_admit(int /*pid*/, std::uint64_t state_bytes) const {
  const std::uint64_t held = clients_bytes();
  const std::int64_t fit = slots_for(shape_.budget_bytes, held + state_bytes);
  if (fit < std::int64_t(shape_.floor_slots)) {
    const std::uint64_t floor_bytes = shape_.floor_slots * shape_.record_bytes;
    const std::uint64_t fixed = shape_.trunk_bytes + floor_bytes + held;
    const std::uint64_t room = shape_.budget_bytes > fixed ? shape_.budget_bytes - fixed : 0;
    std::string who;
    for (const auto& [idx, c] : clients_) {
      who += (who.empty() ? "" : ", ") + std::string("client ") + std::to_string(idx) + " pid " + std::to_string(c.pid) +
             ": " + format_bytes(c.state_bytes);
    }
    return make_error(Errc::ram_budget,
                      "attach refused for " + shape_.container + ": budget " + format_bytes(shape_.budget_bytes) +
                          " holds trunk " + format_bytes(shape_.trunk_bytes) + " + expert cache floor " +
                          std::to_string(shape_.floor_slots) + " slots (" + format_bytes(floor_bytes) +
                          ") + client state " + format_bytes(held) + " (" + (who.empty() ? "no clients" : who) +
                          "); requested " + format_bytes(state_bytes) + ", at most " + format_bytes(room) +
                          " fits (a budget of " + format_bytes(fixed + state_bytes) + " would hold it)");
  }
  return ok();
}

Result<std::uint64_t> BudgetLedger::admit(int client_idx, int pid, std::uint64_t state_bytes) {
  if (clients_.contains(client_idx)) {
    return make_error(Errc::argument, "client " + std::to_string(client_idx) + " already holds a reservation");
  }
  WASTE_TRY(can_admit(pid, state_bytes));
  const std::int64_t fit = slots_for(shape_.budget_bytes, clients_bytes() + state_bytes);
  clients_.emplace(client_idx, Client{pid, state_bytes});
  usable_slots_ = std::min(usable_slots_, std::uint64_t(fit));
  return usable_slots_;
}

std::uint64_t BudgetLedger::release(int client_idx) noexcept {
  clients_.erase(client_idx);
  const std::int64_t fit = slots_for(shape_.budget_bytes, clients_bytes());
  if (fit > std::int64_t(usable_slots_)) usable_slots_ = std::uint64_t(fit);
  return usable_slots_;
}

Status BudgetLedger::set_budget(std::uint64_t budget_bytes) {
  const std::int64_t fit = slots_for(budget_bytes, clients_bytes());
  if (fit < std::int64_t(shape_.floor_slots)) {
    const std::uint64_t need = shape_.trunk_bytes + shape_.floor_slots * shape_.record_bytes + clients_bytes();
    return make_error(Errc::ram_budget, "budget " + format_bytes(budget_bytes) +
                                            " cannot hold the trunk, the expert cache floor and the attached clients' state (" +
                                            format_bytes(need) + ")");
  }
  shape_.budget_bytes = budget_bytes;
  usable_slots_ = std::uint64_t(fit);
  return ok();
}

}  // namespace waste
