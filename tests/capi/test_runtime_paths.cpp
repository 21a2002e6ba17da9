// shared/runtime_paths: the data directory an installed binary uses, and its order against the
// source tree's configs/ (the build tree's fallback).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "../cli/cli_test_support.hpp"
#include "shared/runtime_paths.hpp"
#include "shared/synth/synth.hpp"

namespace waste {

TEST_CASE("$WASTE_DATA_DIR wins over the source tree's configs/, which stays the build tree's fallback",
          "[capi][paths]") {
  namespace fs = std::filesystem;
  test::ScratchDir dir;
  ::unsetenv("WASTE_PRESETS_DIR");
  // Hazard: a build-tree binary must keep finding the source presets (no share/waste beside it).
  ::unsetenv("WASTE_DATA_DIR");
  CHECK(synth::presets_dir() == fs::path(WASTE_SOURCE_DIR) / "configs/presets");
  CHECK(find_data_subdir("chat") == fs::path(WASTE_SOURCE_DIR) / "configs/chat");

  fs::create_directories(dir.path() / "presets");
  ::setenv("WASTE_DATA_DIR", dir.path().c_str(), 1);
  CHECK(synth::presets_dir() == dir.path() / "presets");
  CHECK(data_dir_candidates().front() == dir.path());
  // A data dir without the subdirectory does not hide the next candidate's.
  CHECK(find_data_subdir("chat") == fs::path(WASTE_SOURCE_DIR) / "configs/chat");
  CHECK_FALSE(find_data_subdir("no-such-subdir").has_value());
  ::unsetenv("WASTE_DATA_DIR");
}

}  // namespace waste
