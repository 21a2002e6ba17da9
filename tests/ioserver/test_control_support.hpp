// Helpers for the control-plane tests: a private runtime dir per test, a scratch directory,
// running a command and capturing its output, a tiny container from `waste synth`.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace waste::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("waste-d2-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 100000));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Points the runtime dir (sockets, info files) at a fresh directory for this test.
struct ScopedRuntimeDir {
  TempDir dir{"rt"};
  ScopedRuntimeDir() { ::setenv("WASTE_RUNTIME_DIR", (dir.path / "run").c_str(), 1); }
  ~ScopedRuntimeDir() { ::unsetenv("WASTE_RUNTIME_DIR"); }
};

struct CommandResult {
  int exit_code = -1;
  std::string output;   // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  std::FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `waste synth --preset tiny` into dir/tiny; empty path when the waste binary is not built.
inline std::filesystem::path make_tiny_container(const std::filesystem::path& dir) {
#ifdef WASTE_CLI_BIN
  const std::filesystem::path out = dir / "tiny";
  const auto r = run_command(std::string(WASTE_CLI_BIN) + " synth --preset tiny --out " + out.string());
  if (r.exit_code == 0 && std::filesystem::exists(out / "manifest.json")) return out;
#endif
  return {};
}

}  // namespace waste::test
