#include "shared/runtime_paths.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <system_error>

// Install-layout relations, set by the build from GNUInstallDirs (relative, so the prefix can
// move); the defaults are the plain layout.
#ifndef WASTE_BIN_TO_DATA
#define WASTE_BIN_TO_DATA "../share/waste"
#endif
#ifndef WASTE_LIB_TO_DATA
#define WASTE_LIB_TO_DATA "../share/waste"
#endif
#ifndef WASTE_LIB_TO_BIN
#define WASTE_LIB_TO_BIN "../bin"
#endif

namespace waste {

namespace fs = std::filesystem;

namespace {

// Any symbol of this file: dladdr names the object (executable or .so) it was linked into.
void module_anchor() {}

void push_unique(std::vector<fs::path>& out, fs::path p) {
  if (p.empty()) return;
  p = p.lexically_normal();
  for (const auto& q : out) {
    if (q == p) return;
  }
  out.push_back(std::move(p));
}

}  // namespace

fs::path self_exe_path() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : self;
}

fs::path self_module_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&module_anchor), &info) == 0 || info.dli_fname == nullptr) {
    return self_exe_path();
  }
  std::error_code ec;
  fs::path p = fs::canonical(info.dli_fname, ec);
  // The main program's dli_fname may be argv[0] (relative, PATH-found): /proc/self/exe is exact.
  if (ec || p == fs::canonical(self_exe_path(), ec)) return self_exe_path();
  return p;
}

std::vector<fs::path> data_dir_candidates() {
  std::vector<fs::path> out;
  if (const char* env = std::getenv("WASTE_DATA_DIR"); env != nullptr && *env != '\0') push_unique(out, env);
  const fs::path module = self_module_path();
  const fs::path exe = self_exe_path();
  if (!module.empty() && module != exe) push_unique(out, module.parent_path() / WASTE_LIB_TO_DATA);
  if (!exe.empty()) push_unique(out, exe.parent_path() / WASTE_BIN_TO_DATA);
#ifdef WASTE_SOURCE_CONFIGS_DIR
  push_unique(out, WASTE_SOURCE_CONFIGS_DIR);
#endif
  return out;
}

std::optional<fs::path> find_data_subdir(const fs::path& sub) {
  std::error_code ec;
  for (const auto& dir : data_dir_candidates()) {
    if (fs::is_directory(dir / sub, ec)) return dir / sub;
  }
  return std::nullopt;
}

std::vector<fs::path> ioserver_dir_candidates() {
  std::vector<fs::path> out;
  const fs::path exe = self_exe_path();
  if (!exe.empty()) {
    push_unique(out, exe.parent_path());
    push_unique(out, exe.parent_path().parent_path() / "ioserver");
  }
  const fs::path module = self_module_path();
  if (!module.empty() && module != exe) {
    push_unique(out, module.parent_path() / WASTE_LIB_TO_BIN);
    push_unique(out, module.parent_path().parent_path().parent_path() / "ioserver");
  }
  return out;
}

}  // namespace waste
