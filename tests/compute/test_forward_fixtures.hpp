// Synthetic containers for the forward-pass and engine tests: `waste synth --preset NAME`
// run once per preset per test process into a temporary directory (removed at exit).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>

#include <catch2/catch.hpp>

namespace waste::test {

class SynthDirs {
 public:
  ~SynthDirs() {
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }
  // The container for `preset`, synthesised on first use; empty path (and a FAIL) on error.
  std::filesystem::path get(const std::string& preset) {
    if (auto it = dirs_.find(preset); it != dirs_.end()) return it->second;
    if (root_.empty()) {
      std::string templ = (std::filesystem::temp_directory_path() / "waste-forward-XXXXXX").string();
      if (mkdtemp(templ.data()) == nullptr) return {};
      root_ = templ;
    }
    const char* bin_env = std::getenv("WASTE_BIN_DIR");
    const std::filesystem::path bin_dir = bin_env ? bin_env : std::filesystem::path(WASTE_BINARY_DIR) / "cli";
    const std::filesystem::path out = root_ / preset;
    const std::string cmd = "\"" + (bin_dir / "waste").string() + "\" synth --preset " + preset + " --out \"" +
                            out.string() + "\" > \"" + (root_ / (preset + ".log")).string() + "\" 2>&1";
    if (std::system(cmd.c_str()) != 0) return {};
    dirs_[preset] = out;
    return out;
  }

 private:
  std::filesystem::path root_;
  std::map<std::string, std::filesystem::path> dirs_;
};

inline std::filesystem::path synth_container(const std::string& preset) {
  static SynthDirs dirs;
  auto path = dirs.get(preset);
  INFO("waste synth --preset " << preset);
  REQUIRE_FALSE(path.empty());
  return path;
}

}  // namespace waste::test
