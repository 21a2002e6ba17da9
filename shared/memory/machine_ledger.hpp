// One RAM budget for the machine: every waste-ioserver of this user registers its budget in a
// small JSON file in the runtime dir (machine-ledger.json), read and written only under an
// exclusive flock, so daemons of different containers keep their sum under the machine's cap
// (3/4 of usable RAM) without a server of their own. Entries of dead daemons (pid + start time)
// are pruned on every access; the file is removed when the last entry goes.
//   [{"instance", "model", "pid", "start_ticks", "budget_bytes"}, ...]
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "shared/result.hpp"

namespace waste {

struct MachineLedgerEntry {
  std::string instance;
  std::string model;
  int pid = 0;
  std::uint64_t start_ticks = 0;
  std::uint64_t budget_bytes = 0;
};

// What the others hold, for a refusal: "waste-ioserver A (pid 1) for /m/a: 10.0 MB, ...".
std::string describe_holders(const std::vector<MachineLedgerEntry>& others);

class MachineLedger {
 public:
  explicit MachineLedger(std::filesystem::path file) : file_(std::move(file)) {}

  // Chooses and registers `entry`'s budget atomically: under the lock, after pruning, `choose`
  // gets what the other daemons hold and returns the budget (or an error naming them). The
  // ledger then refuses a budget that, next to others, would pass `cap_bytes`:
  //   "budget B for M does not fit under the machine cap C: other daemons hold H (LIST); at most F is free"
  // An entry of the same instance (a crashed predecessor) is replaced.
  using Chooser = std::function<Result<std::uint64_t>(std::uint64_t others_bytes,
                                                     const std::vector<MachineLedgerEntry>& others)>;
  Result<std::uint64_t> register_daemon(MachineLedgerEntry entry, std::uint64_t cap_bytes, const Chooser& choose);
  // `config {budget_bytes}` and automatic growth: the same cap check against the others
  // (strict: also refused alone above the cap; cap 0: no check).
  Status update_budget(const std::string& instance, int pid, std::uint64_t budget_bytes, std::uint64_t cap_bytes,
                       bool strict = false);
  // At exit. Never fails (a daemon that cannot reach the file is pruned as dead later).
  void remove(const std::string& instance, int pid) noexcept;
  // The live entries (pruned).
  Result<std::vector<MachineLedgerEntry>> entries();

  [[nodiscard]] const std::filesystem::path& file() const noexcept { return file_; }

 private:
  std::filesystem::path file_;
};

}  // namespace waste
