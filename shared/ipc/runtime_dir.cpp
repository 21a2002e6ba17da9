#include "shared/ipc/runtime_dir.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "shared/ipc/protocol.hpp"
#include "shared/ipc/segment_names.hpp"

namespace waste::ipc {

namespace fs = std::filesystem;

fs::path runtime_dir() {
  if (const char* over = std::getenv("WASTE_RUNTIME_DIR"); over != nullptr && *over != '\0') return over;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') return fs::path(xdg) / "waste";
  return fs::path("/tmp") / ("waste-" + std::to_string(::getuid()));
}

Result<fs::path> ensure_runtime_dir() {
  const fs::path dir = runtime_dir();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return make_error(Errc::io, dir.string() + ": cannot create runtime dir: " + std::strerror(errno));
  }
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0) return make_error(Errc::io, dir.string() + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return make_error(Errc::io, dir.string() + ": runtime dir is not a directory");
  // Someone else's directory in /tmp could capture our sockets.
  if (st.st_uid != ::getuid()) {
    return make_error(Errc::io, dir.string() + ": runtime dir is owned by uid " + std::to_string(st.st_uid) +
                                    ", not " + std::to_string(::getuid()));
  }
  if ((st.st_mode & 0077) != 0 && ::chmod(dir.c_str(), 0700) != 0) {
    return make_error(Errc::io, dir.string() + ": cannot restrict runtime dir to 0700: " + std::strerror(errno));
  }
  return dir;
}

fs::path socket_path(std::string_view instance) { return runtime_dir() / ("waste-" + std::string(instance) + ".sock"); }
std::string socket_endpoint(std::string_view instance) { return "ipc://" + socket_path(instance).string(); }
fs::path info_path(std::string_view instance) { return runtime_dir() / ("waste-" + std::string(instance) + ".json"); }
fs::path default_log_path(std::string_view instance) { return runtime_dir() / ("waste-" + std::string(instance) + ".log"); }
fs::path lock_path(std::string_view instance) { return runtime_dir() / ("waste-" + std::string(instance) + ".lock"); }
fs::path start_lock_path(std::string_view instance) { return runtime_dir() / ("waste-" + std::string(instance) + ".start"); }
fs::path machine_ledger_path() { return runtime_dir() / "machine-ledger.json"; }

Result<std::string> instance_for_container(const fs::path& container) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(container, ec);
  if (ec) return make_error(Errc::io, container.string() + ": " + ec.message());
  std::uint64_t h = 1469598103934665603ULL;   // FNV-1a 64
  for (unsigned char c : canonical.string()) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  std::string stem = canonical.filename().string();
  if (stem.ends_with(".waste")) stem.resize(stem.size() - 6);
  std::string clean;
  for (char c : stem) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    clean.push_back(keep ? c : '_');
    if (clean.size() == 32) break;
  }
  if (clean.empty()) clean = "model";
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08llx", static_cast<unsigned long long>(h & 0xffffffffULL));
  return clean + "-" + hex;
}

bool process_alive(int pid) noexcept {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  // A killed child that nobody reaped still answers kill(); it is gone for our purposes.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return true;   // no procfs: trust kill()
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* close_paren = std::strrchr(buf, ')');
  if (n == 0 || close_paren == nullptr || close_paren[1] == '\0') return true;
  const char state = close_paren[2];
  return state != 'Z' && state != 'X';
}

nlohmann::json DaemonInfo::to_json() const {
  return nlohmann::json{{"pid", pid},       {"instance", instance},         {"model", model},
                        {"socket", socket}, {"budget_bytes", budget_bytes}, {"arena_slots", arena_slots},
                        {"log", log},       {"protocol", protocol}};
}

Result<DaemonInfo> DaemonInfo::from_json(const nlohmann::json& j) {
  try {
    DaemonInfo info;
    info.pid = j.at("pid").get<int>();
    info.instance = j.at("instance").get<std::string>();
    info.model = j.at("model").get<std::string>();
    info.socket = j.at("socket").get<std::string>();
    info.budget_bytes = j.at("budget_bytes").get<std::uint64_t>();
    info.arena_slots = j.value("arena_slots", std::uint64_t{0});
    info.log = j.value("log", std::string());
    info.protocol = j.value("protocol", 0);
    return info;
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::format, std::string("daemon info: ") + e.what());
  }
}

Status write_daemon_info(const DaemonInfo& info) {
  auto dir = ensure_runtime_dir();
  if (!dir) return std::unexpected(dir.error());
  const fs::path file = info_path(info.instance);
  const fs::path tmp = file.string() + ".tmp." + std::to_string(::getpid());
  {
    const mode_t old_mask = ::umask(0077);
    std::ofstream out(tmp, std::ios::trunc);
    ::umask(old_mask);
    if (!out) return make_error(Errc::io, tmp.string() + ": cannot write");
    out << info.to_json().dump(2) << "\n";
    if (!out.flush()) return make_error(Errc::io, tmp.string() + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) return make_error(Errc::io, file.string() + ": " + ec.message());
  return ok();
}

Result<DaemonInfo> read_daemon_info(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return make_error(Errc::io, file.string() + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded()) return make_error(Errc::format, file.string() + ": not JSON");
  auto info = DaemonInfo::from_json(j);
  if (!info) return std::unexpected(info.error().with_context(file.string()));
  return info;
}

std::vector<DaemonInfo> list_daemon_infos() {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(runtime_dir(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("waste-") && name.ends_with(".json")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<DaemonInfo> infos;
  for (const auto& f : files) {
    if (auto info = read_daemon_info(f)) infos.push_back(std::move(*info));
  }
  return infos;
}

std::vector<std::string> remove_instance_files(std::string_view instance) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::path& file : {socket_path(instance), info_path(instance)}) {
    if (fs::remove(file, ec)) removed.push_back(file.string());
  }
  for (const std::string& name : {arena_segment_name(instance), trunk_segment_name(instance)}) {
    if (::shm_unlink(("/" + name).c_str()) == 0) removed.push_back("shm " + name);
  }
  return removed;
}

}  // namespace waste::ipc
