#include "cli/ctl/ctl_commands.hpp"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ioserver/options/daemon_cli.hpp"
#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/orphan_segments.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/file_lock.hpp"

namespace waste::ctl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "waste-ctl: %s\n", message.c_str());
  return 1;
}

// Instances whose daemon died: report and remove what they left.
int clean_stale(bool quiet_when_none) {
  int cleaned = 0;
  for (const auto& info : ipc::list_daemon_infos()) {
    if (ipc::process_alive(info.pid)) continue;
    for (const auto& what : ipc::remove_instance_files(info.instance)) {
      std::printf("removed stale %s (instance %s, pid %d not running)\n", what.c_str(), info.instance.c_str(), info.pid);
      ++cleaned;
    }
    // Its lifetime lock, unless a successor holds it already.
    if (auto lock = FileLock::try_acquire(ipc::lock_path(info.instance)); lock && *lock) {
      (*lock)->unlink_and_release();
    }
  }
  if (cleaned == 0 && !quiet_when_none) std::printf("nothing stale\n");
  return cleaned;
}

// Segments whose info file went missing too (a runtime dir removed under a dead daemon): the
// arena header names their daemon. Only on an explicit `cleanup`, which scans all of /dev/shm.
int clean_orphans() {
  int cleaned = 0;
  for (const auto& what : ipc::remove_orphan_segments()) {
    std::printf("removed orphaned %s (its daemon is not running)\n", what.c_str());
    ++cleaned;
  }
  return cleaned;
}

Result<ipc::DaemonInfo> resolve_target(const std::string& target) {
  if (!target.empty()) return ipc::find_daemon(target);
  std::vector<ipc::DaemonInfo> live;
  for (auto& info : ipc::list_daemon_infos()) {
    if (ipc::process_alive(info.pid)) live.push_back(info);
  }
  if (live.empty()) return make_error(Errc::ipc, "no waste-ioserver is running");
  if (live.size() > 1) {
    std::string names;
    for (const auto& i : live) names += " " + i.instance;
    return make_error(Errc::argument, "several daemons are running; name one:" + names);
  }
  return live.front();
}

std::string pct(std::uint64_t part, std::uint64_t whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", whole ? 100.0 * double(part) / double(whole) : 0.0);
  return buf;
}

std::uint64_t u64(const json& j, const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<std::uint64_t>() : 0; }

void print_stats(const json& s) {
  const json& b = s["budget"];
  const json& t = s["totals"];
  std::printf("%s (pid %d) %s\n", s.value("instance", std::string()).c_str(), s.value("pid", 0),
              s.value("model", std::string()).c_str());
  std::printf("  budget   %s used of %s (trunk %s, arena %s in %llu slots, clients %s)\n",
              format_bytes(u64(b, "used_bytes")).c_str(), format_bytes(u64(b, "budget_bytes")).c_str(),
              format_bytes(u64(b, "trunk_bytes")).c_str(), format_bytes(u64(b, "arena_bytes")).c_str(),
              static_cast<unsigned long long>(u64(b, "arena_slots")), format_bytes(u64(b, "clients_bytes")).c_str());
  const std::uint64_t hits = u64(t, "hits"), misses = u64(t, "misses");
  std::printf("  total    hits %llu  misses %llu  hit %s  read %s  queue %llu  direct I/O %s  policy %s\n",
              static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses),
              pct(hits, hits + misses).c_str(), format_bytes(u64(t, "bytes_read")).c_str(),
              static_cast<unsigned long long>(u64(t, "queue_depth")), t.value("direct_io", false) ? "on" : "off",
              s.value("policy", std::string("?")).c_str());
  // The background fill (--fill): records read with nobody asking, apart from the totals above.
  if (const std::string fill = t.value("fill", std::string("off")); fill != "off") {
    std::printf("  fill     %s: %llu of %llu records read (%s)\n", fill.c_str(),
                static_cast<unsigned long long>(u64(t, "fill_records")),
                static_cast<unsigned long long>(u64(t, "fill_total")), format_bytes(u64(t, "fill_bytes")).c_str());
  }
  if (t.contains("read_latency_us_log2") && t["read_latency_us_log2"].is_array()) {
    std::string hist;
    const auto& h = t["read_latency_us_log2"];
    for (std::size_t i = 0; i < h.size(); ++i) {
      if (h[i].get<std::uint64_t>() == 0) continue;
      hist += "  <" + std::to_string(1ULL << (i + 1)) + "us:" + std::to_string(h[i].get<std::uint64_t>());
    }
    if (!hist.empty()) std::printf("  latency %s\n", hist.c_str());
  }
  // Engram page pool: one line for the pool, one per table (demands of pages; a prefetched page
  // then demanded counts as a hit).
  if (s.contains("engram") && s["engram"].is_object() && u64(s["engram"], "pool_pages") > 0) {
    const json& e = s["engram"];
    std::printf("  engram   pool %llu pages (%s), %llu used, %llu pinned, %llu evictions, direct I/O %s\n",
                static_cast<unsigned long long>(u64(e, "pool_pages")), format_bytes(u64(e, "pool_pages") * 4096).c_str(),
                static_cast<unsigned long long>(u64(e, "pool_used")), static_cast<unsigned long long>(u64(e, "pool_pinned")),
                static_cast<unsigned long long>(u64(e, "evictions")), e.value("direct_io", false) ? "on" : "off");
    if (e.contains("tables") && e["tables"].is_array()) {
      for (const auto& t : e["tables"]) {
        const std::uint64_t th = u64(t, "hits"), tm = u64(t, "misses");
        std::printf("  engram L%d  hits %llu  misses %llu  hit %s  read %s  prefetch reads %llu  errors %llu\n",
                    t.value("layer", -1), static_cast<unsigned long long>(th), static_cast<unsigned long long>(tm),
                    pct(th, th + tm).c_str(), format_bytes(u64(t, "bytes_read")).c_str(),
                    static_cast<unsigned long long>(u64(t, "prefetch_reads")),
                    static_cast<unsigned long long>(u64(t, "read_errors")));
      }
    }
  }
  for (const auto& c : s["clients"]) {
    const std::uint64_t ch = u64(c, "hits"), cm = u64(c, "misses");
    std::printf("  client %d  pid %d  state %s  hits %llu  misses %llu  hit %s  read %s  queue %llu\n",
                c.value("client_idx", -1), c.value("pid", 0), format_bytes(u64(c, "state_bytes")).c_str(),
                static_cast<unsigned long long>(ch), static_cast<unsigned long long>(cm), pct(ch, ch + cm).c_str(),
                format_bytes(u64(c, "bytes_read")).c_str(), static_cast<unsigned long long>(u64(c, "queue_depth")));
  }
}

}  // namespace

int start(const ioserver::DaemonOptions& options) {
  std::error_code ec;
  const std::string model = options.io.container.string();
  if (!fs::is_directory(model, ec)) return fail(model + ": not a container directory");
  clean_stale(/*quiet_when_none=*/true);
  ioserver::DaemonOptions named = options;
  if (named.io.instance.empty()) {
    auto derived = ipc::instance_for_container(model);
    if (!derived) return fail(derived.error().message);
    named.io.instance = *derived;
  }
  const std::string instance = named.io.instance;
  if (auto st = ipc::run_ioserver(ioserver::daemon_argv(named)); !st) return fail(st.error().message);

  auto info = ipc::read_daemon_info(ipc::info_path(instance));
  if (!info) return fail(info.error().message);
  auto client = ipc::ControlClient::connect(info->socket);
  if (!client) return fail(client.error().message);
  if (auto pong = client->ping(); !pong) return fail(pong.error().message);
  std::printf("instance %s\npid %d\nsocket %s\nbudget %s (%llu bytes)\narena %llu slots\n", info->instance.c_str(),
              info->pid, info->socket.c_str(), format_bytes(info->budget_bytes).c_str(),
              static_cast<unsigned long long>(info->budget_bytes), static_cast<unsigned long long>(info->arena_slots));
  return 0;
}

int stop(const std::string& target, int drain_ms) {
  auto info = resolve_target(target);
  if (!info) return fail(info.error().message);
  auto client = ipc::ControlClient::connect(info->socket);
  Status asked = client ? client->shutdown(drain_ms) : Status(std::unexpected(client.error()));
  if (!asked) {
    // It does not answer: ask the kernel instead.
    std::fprintf(stderr, "waste-ctl: %s; sending SIGTERM to pid %d\n", asked.error().message.c_str(), info->pid);
    ::kill(info->pid, SIGTERM);
  }
  if (!ipc::wait_process_gone(info->pid, drain_ms + 3000)) {
    return fail("waste-ioserver " + info->instance + " (pid " + std::to_string(info->pid) + ") did not stop");
  }
  // A clean exit removed these already; a forced one may not have. Unless a successor of the
  // instance (an auto-started daemon) already serves: its files are not ours to remove.
  const auto successor = ipc::read_daemon_info(ipc::info_path(info->instance));
  if (!successor || !ipc::process_alive(successor->pid)) ipc::remove_instance_files(info->instance);
  std::printf("stopped %s (pid %d)\n", info->instance.c_str(), info->pid);
  return 0;
}

int status() {
  const auto infos = ipc::list_daemon_infos();
  if (infos.empty()) {
    std::printf("no waste-ioserver is running (runtime dir %s)\n", ipc::runtime_dir().c_str());
    return 0;
  }
  for (const auto& info : infos) {
    if (!ipc::process_alive(info.pid)) {
      std::printf("%s  stale: pid %d is not running (run `waste-ctl cleanup`)\n", info.instance.c_str(), info.pid);
      continue;
    }
    auto client = ipc::ControlClient::connect(info.socket);
    auto s = client ? client->stats() : Result<json>(std::unexpected(client.error()));
    if (!s) {
      std::printf("%s  pid %d  not answering: %s\n", info.instance.c_str(), info.pid, s.error().message.c_str());
      continue;
    }
    const json& b = (*s)["budget"];
    std::printf("%s  pid %d  %s\n  socket %s\n  budget %s used of %s, %zu client(s)\n", info.instance.c_str(), info.pid,
                info.model.c_str(), info.socket.c_str(), format_bytes(u64(b, "used_bytes")).c_str(),
                format_bytes(u64(b, "budget_bytes")).c_str(), (*s)["clients"].size());
    for (const auto& c : (*s)["clients"]) {
      std::printf("  client %d  pid %d  state %s\n", c.value("client_idx", -1), c.value("pid", 0),
                  format_bytes(u64(c, "state_bytes")).c_str());
    }
  }
  return 0;
}

int stats(const std::string& target, bool as_json, bool watch, double interval_s, int count) {
  auto info = resolve_target(target);
  if (!info) return fail(info.error().message);
  auto client = ipc::ControlClient::connect(info->socket);
  if (!client) return fail(client.error().message);
  for (int n = 1;; ++n) {
    auto s = client->stats();
    if (!s) return fail(s.error().message);
    if (as_json) {
      std::printf("%s\n", s->dump().c_str());
    } else {
      print_stats(*s);
    }
    std::fflush(stdout);
    if (!watch || (count > 0 && n >= count)) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
  return 0;
}

int cleanup() {
  const int orphans = clean_orphans();
  clean_stale(/*quiet_when_none=*/orphans > 0);
  return 0;
}

}  // namespace waste::ctl
