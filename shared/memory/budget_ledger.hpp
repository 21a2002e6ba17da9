// The daemon's RAM account for its container: the shared trunk, the expert cache (arena slots it
// lets the data plane use) and the state each attached client declared it will hold. A client's
// state is admitted by lowering the cache's usable slots toward its floor (2·top_k records, what
// the plan's floor assumes), never refused while the cache can give room; it is refused only
// when the cache would have to go below that floor (waste-lessons.md §1.11: processes that each
// resolve a budget alone oversubscribe the machine; here they share one).
// Not thread-safe: the daemon's control loop is its only user.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "shared/result.hpp"

namespace waste {

struct LedgerShape {
  std::string container;            // named in refusals
  std::uint64_t budget_bytes = 0;
  std::uint64_t trunk_bytes = 0;
  std::uint64_t record_bytes = 0;   // one arena slot
  std::uint64_t max_slots = 0;      // the arena as created (never grows past it)
  std::uint64_t floor_slots = 0;    // the cache never shrinks below this
};

class BudgetLedger {
 public:
  explicit BudgetLedger(LedgerShape shape);

  // Admits `state_bytes` for client `client_idx` (process `pid`) and returns the cache's usable
  // slots after it (lowered if needed). Errc::argument when the index already holds state;
  // Errc::ram_budget when even the cache at its floor leaves no room:
  //   "attach refused for C: budget B holds trunk T + expert cache floor F slots (X) + client
  //    state S (client 0 pid 123: S0); requested R, at most M fits (a budget of N would hold it)"
  Result<std::uint64_t> admit(int client_idx, int pid, std::uint64_t state_bytes);
  // The refusal admit() would give, without admitting (before the data plane is asked).
  [[nodiscard]] Status can_admit(int pid, std::uint64_t state_bytes) const;
  // Releases a client's state; the cache grows back (up to the arena). Returns the usable slots.
  std::uint64_t release(int client_idx) noexcept;
  // A new budget must hold trunk + cache floor + the clients' state. Errc::ram_budget otherwise.
  // The usable slots follow it (up to the arena).
  Status set_budget(std::uint64_t budget_bytes);

  [[nodiscard]] const std::string& container() const noexcept { return shape_.container; }
  [[nodiscard]] std::uint64_t budget_bytes() const noexcept { return shape_.budget_bytes; }
  [[nodiscard]] std::uint64_t trunk_bytes() const noexcept { return shape_.trunk_bytes; }
  [[nodiscard]] std::uint64_t record_bytes() const noexcept { return shape_.record_bytes; }
  [[nodiscard]] std::uint64_t max_slots() const noexcept { return shape_.max_slots; }
  [[nodiscard]] std::uint64_t floor_slots() const noexcept { return shape_.floor_slots; }
  [[nodiscard]] std::uint64_t usable_slots() const noexcept { return usable_slots_; }
  [[nodiscard]] std::uint64_t arena_bytes() const noexcept { return usable_slots_ * shape_.record_bytes; }
  [[nodiscard]] std::uint64_t clients_bytes() const noexcept;
  [[nodiscard]] std::uint64_t used_bytes() const noexcept { return shape_.trunk_bytes + arena_bytes() + clients_bytes(); }
  [[nodiscard]] std::uint64_t client_bytes(int client_idx) const noexcept;

  struct Client {
    int pid = 0;
    std::uint64_t state_bytes = 0;
  };
  [[nodiscard]] const std::map<int, Client>& clients() const noexcept { return clients_; }

 private:
  // Slots the budget leaves after trunk and `state_bytes` of client state (capped at the arena);
  // -1 when not even that much fits.
  [[nodiscard]] std::int64_t slots_for(std::uint64_t budget, std::uint64_t state_bytes) const noexcept;

  LedgerShape shape_;
  std::uint64_t usable_slots_ = 0;
  std::map<int, Client> clients_;
};

}  // namespace waste
