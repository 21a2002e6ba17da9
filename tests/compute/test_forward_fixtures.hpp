// Synthetic containers for the forward-pass and engine tests: the `waste synth` library
// (shared/synth) writes each preset once per test process into a temporary directory
// (removed at exit).
#pragma once

#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>

#include <catch2/catch.hpp>

#include "shared/synth/synth.hpp"

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
    const std::filesystem::path out = root_ / preset;
    synth::SynthRequest request;
    request.preset = preset;
    auto spec = synth::make_spec(request);
    if (!spec) {
      error_ = spec.error().message;
      return {};
    }
    if (auto written = synth::write_container(*spec, out); !written) {
      error_ = written.error().message;
      return {};
    }
    dirs_[preset] = out;
    return out;
  }

 private:
  std::filesystem::path root_;
  std::map<std::string, std::filesystem::path> dirs_;

 public:
  std::string error_;
};

inline std::filesystem::path synth_container(const std::string& preset) {
  static SynthDirs dirs;
  auto path = dirs.get(preset);
  INFO("synth preset " << preset << ": " << dirs.error_);
  REQUIRE_FALSE(path.empty());
  return path;
}

}  // namespace waste::test
