// Where an installed or a build-tree WASTE finds its files: the program (or libwaste.so) that
// is running, the data directory (presets, chat formats, grammars) and waste-ioserver.
// Installed files are found relative to the binary that runs, so a prefix can be moved
// (`cmake --install --prefix P`, then `mv P Q`) and a .deb lands in /usr; the build tree keeps
// working through the source tree's configs/ compiled in as the last resort.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

namespace waste {

// /proc/self/exe resolved; empty when unreadable.
std::filesystem::path self_exe_path();
// The file holding this code: libwaste.so when it is a shared library loaded by a host
// (python, a C program), else the executable. Empty when unknown.
std::filesystem::path self_module_path();

// Candidate data directories in order of preference (existing or not): $WASTE_DATA_DIR, then
// <module>/<lib-to-data> and <exe>/<bin-to-data> (the install layout: bin/../share/waste,
// lib/../share/waste), then the source tree's configs/ (developers' build tree).
std::vector<std::filesystem::path> data_dir_candidates();
// The first candidate that has `sub` (e.g. "presets"): candidate / sub. nullopt when none has.
std::optional<std::filesystem::path> find_data_subdir(const std::filesystem::path& sub);

// Directories that may hold waste-ioserver beside the running binary, in order: <exe dir>,
// <exe dir>/../ioserver (build tree), <module dir>/<lib-to-bin> (installed libwaste.so) and
// <module dir>/../../ioserver (build tree's compute/capi/libwaste.so).
std::vector<std::filesystem::path> ioserver_dir_candidates();

}  // namespace waste
