#include "shared/memory/machine_ledger.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "shared/ipc/process_liveness.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/file_lock.hpp"

namespace waste {

namespace {

using nlohmann::json;

// Long enough for any holder (they only read and rewrite a few hundred bytes).
constexpr std::chrono::milliseconds kLedgerLockWait{5000};

Result<std::vector<MachineLedgerEntry>> load(const FileLock& lock) {
  std::string text;
  char buf[4096];
  for (off_t off = 0;;) {
    const ssize_t n = ::pread(lock.fd(), buf, sizeof buf, off);
    if (n < 0) return make_error(Errc::io, lock.path().string() + ": read: " + std::strerror(errno));
    if (n == 0) break;
    text.append(buf, std::size_t(n));
    off += n;
  }
  std::vector<MachineLedgerEntry> out;
  if (text.empty()) return out;
  const json j = json::parse(text, nullptr, false);
  // A torn or foreign file is not worth refusing every daemon over: start it afresh.
  if (j.is_discarded() || !j.is_array()) return out;
  for (const auto& e : j) {
    try {
      out.push_back(MachineLedgerEntry{e.at("instance").get<std::string>(), e.value("model", std::string()),
                                       e.at("pid").get<int>(), e.value("start_ticks", std::uint64_t{0}),
                                       e.at("budget_bytes").get<std::uint64_t>()});
    } catch (const json::exception&) {
    }
  }
  return out;
}

void prune(std::vector<MachineLedgerEntry>& entries) {
  std::erase_if(entries, [](const MachineLedgerEntry& e) { return !ipc::process_alive(e.pid, e.start_ticks); });
}

// Rewrites the file in place (every access holds the lock) or, when empty, removes it.
Status store(FileLock& lock, const std::vector<MachineLedgerEntry>& entries) {
  if (entries.empty()) {
    lock.unlink_and_release();
    return ok();
  }
  json j = json::array();
  for (const auto& e : entries) {
    j.push_back(json{{"instance", e.instance}, {"model", e.model}, {"pid", e.pid}, {"start_ticks", e.start_ticks},
                     {"budget_bytes", e.budget_bytes}});
  }
  const std::string text = j.dump(2) + "\n";
  if (::ftruncate(lock.fd(), 0) != 0 || ::pwrite(lock.fd(), text.data(), text.size(), 0) != ssize_t(text.size())) {
    return make_error(Errc::io, lock.path().string() + ": write: " + std::strerror(errno));
  }
  return ok();
}

std::uint64_t sum(const std::vector<MachineLedgerEntry>& entries) {
  std::uint64_t total = 0;
  for (const auto& e : entries) total += e.budget_bytes;
  return total;
}

Error over_cap(std::uint64_t budget, const std::string& model, std::uint64_t cap,
               const std::vector<MachineLedgerEntry>& others) {
  const std::uint64_t held = sum(others);
  return Error{Errc::ram_budget, "budget " + format_bytes(budget) + " for " + model +
                                     " does not fit under the machine cap " + format_bytes(cap) +
                                     ": other daemons hold " + format_bytes(held) + " (" + describe_holders(others) +
                                     "); at most " + format_bytes(held < cap ? cap - held : 0) + " is free"};
}

}  // namespace

std::string describe_holders(const std::vector<MachineLedgerEntry>& others) {
  std::string out;
  for (const auto& e : others) {
    if (!out.empty()) out += ", ";
    out += "waste-ioserver " + e.instance + " (pid " + std::to_string(e.pid) + ") for " + e.model + ": " +
           format_bytes(e.budget_bytes);
  }
  return out.empty() ? "none" : out;
}

Result<std::uint64_t> MachineLedger::register_daemon(MachineLedgerEntry entry, std::uint64_t cap_bytes,
                                                     const Chooser& choose) {
  auto lock = FileLock::acquire(file_, kLedgerLockWait, "the machine ledger");
  if (!lock) return std::unexpected(lock.error());
  auto entries = load(*lock);
  if (!entries) return std::unexpected(entries.error());
  prune(*entries);
  std::erase_if(*entries, [&](const MachineLedgerEntry& e) { return e.instance == entry.instance; });
  auto budget = choose(sum(*entries), *entries);
  if (!budget) {
    (void)store(*lock, *entries);
    return std::unexpected(budget.error());
  }
  // Alone, a budget above the cap is the caller's contract (warned elsewhere); next to
  // others it would oversubscribe the machine.
  if (!entries->empty() && cap_bytes != 0 && sum(*entries) + *budget > cap_bytes) {
    (void)store(*lock, *entries);
    return std::unexpected(over_cap(*budget, entry.model, cap_bytes, *entries));
  }
  entry.budget_bytes = *budget;
  entries->push_back(std::move(entry));
  WASTE_TRY(store(*lock, *entries));
  return *budget;
}

Status MachineLedger::update_budget(const std::string& instance, int pid, std::uint64_t budget_bytes,
                                    std::uint64_t cap_bytes, bool strict) {
  auto lock = FileLock::acquire(file_, kLedgerLockWait, "the machine ledger");
  if (!lock) return std::unexpected(lock.error());
  auto entries = load(*lock);
  if (!entries) return std::unexpected(entries.error());
  prune(*entries);
  std::vector<MachineLedgerEntry> others;
  MachineLedgerEntry self{instance, "", pid, ipc::process_start_ticks(pid).value_or(0), budget_bytes};
  for (const auto& e : *entries) {
    if (e.instance == instance && e.pid == pid) {
      self.model = e.model;
      self.start_ticks = e.start_ticks;
    } else {
      others.push_back(e);
    }
  }
  if ((strict || !others.empty()) && cap_bytes != 0 && sum(others) + budget_bytes > cap_bytes) {
    (void)store(*lock, *entries);
    return std::unexpected(over_cap(budget_bytes, self.model.empty() ? instance : self.model, cap_bytes, others));
  }
  others.push_back(self);
  return store(*lock, others);
}

void MachineLedger::remove(const std::string& instance, int pid) noexcept {
  try {
    std::error_code ec;
    if (!std::filesystem::exists(file_, ec)) return;
    auto lock = FileLock::acquire(file_, kLedgerLockWait, "the machine ledger");
    if (!lock) return;
    auto entries = load(*lock);
    if (!entries) return;
    prune(*entries);
    std::erase_if(*entries, [&](const MachineLedgerEntry& e) { return e.instance == instance && e.pid == pid; });
    (void)store(*lock, *entries);
  } catch (...) {
  }
}

Result<std::vector<MachineLedgerEntry>> MachineLedger::entries() {
  std::error_code ec;
  if (!std::filesystem::exists(file_, ec)) return std::vector<MachineLedgerEntry>{};
  auto lock = FileLock::acquire(file_, kLedgerLockWait, "the machine ledger");
  if (!lock) return std::unexpected(lock.error());
  auto entries = load(*lock);
  if (!entries) return std::unexpected(entries.error());
  prune(*entries);
  WASTE_TRY(store(*lock, *entries));
  return entries;
}

}  // namespace waste
