// The daemon's RAM account for its container: the shared trunk and expert arena it holds, plus
// the state each attached client declared it will hold. An attach that would take the total
// over the budget is refused, naming budget, used and requested (waste-lessons.md §1.11: two
// processes that each resolve a budget alone oversubscribe the machine).
// Not thread-safe: the daemon's control loop is its only user.
#pragma once

#include <cstdint>
#include <map>

#include "shared/result.hpp"

namespace waste {

class BudgetLedger {
 public:
  BudgetLedger(std::uint64_t budget_bytes, std::uint64_t trunk_bytes, std::uint64_t arena_bytes)
      : budget_bytes_(budget_bytes), trunk_bytes_(trunk_bytes), arena_bytes_(arena_bytes) {}

  // Errc::ram_budget: "attach refused: budget 1.30 GB, used 1.25 GB, requested 80.0 MB".
  // Errc::argument when the client index already holds a reservation.
  Status reserve(int client_idx, std::uint64_t state_bytes);
  void release(int client_idx) noexcept;
  // A new budget may not drop below what is in use now. Errc::ram_budget otherwise.
  Status set_budget(std::uint64_t budget_bytes);

  [[nodiscard]] std::uint64_t budget_bytes() const noexcept { return budget_bytes_; }
  [[nodiscard]] std::uint64_t trunk_bytes() const noexcept { return trunk_bytes_; }
  [[nodiscard]] std::uint64_t arena_bytes() const noexcept { return arena_bytes_; }
  [[nodiscard]] std::uint64_t clients_bytes() const noexcept;
  [[nodiscard]] std::uint64_t used_bytes() const noexcept { return trunk_bytes_ + arena_bytes_ + clients_bytes(); }
  [[nodiscard]] std::uint64_t client_bytes(int client_idx) const noexcept;
  [[nodiscard]] const std::map<int, std::uint64_t>& clients() const noexcept { return clients_; }

 private:
  std::uint64_t budget_bytes_;
  std::uint64_t trunk_bytes_;
  std::uint64_t arena_bytes_;
  std::map<int, std::uint64_t> clients_;   // client_idx -> declared state bytes
};

}  // namespace waste
