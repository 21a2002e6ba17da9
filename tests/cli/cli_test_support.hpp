// Shared by the CLI tests: run the built `waste` (from $WASTE_BIN_DIR) with arguments and an
// optional stdin text, capture stdout, stderr and the exit code; and one synthetic container
// with a real small tokenizer per test process (removed at exit).
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

extern char** environ;

namespace waste::test {

namespace fs = std::filesystem;

struct Ran {
  int rc = -1;
  std::string out;
  std::string err;
};

inline fs::path waste_bin() {
  const char* dir = std::getenv("WASTE_BIN_DIR");
  return fs::path(dir ? dir : WASTE_BINARY_DIR "/cli") / "waste";
}

class ScratchDir {
 public:
  ScratchDir() {
    std::string templ = (fs::temp_directory_path() / "waste-cli-XXXXXX").string();
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

inline fs::path ioserver_bin() { return waste_bin().parent_path().parent_path() / "ioserver" / "waste-ioserver"; }

// Runs `BIN ARGS...` with stdin from `input`; no shell, so arguments need no quoting.
inline Ran run_binary(const fs::path& binary, const std::vector<std::string>& args, const std::string& input = "") {
  ScratchDir io;
  REQUIRE_FALSE(io.path().empty());
  const fs::path in = io.path() / "in", out = io.path() / "out", err = io.path() / "err";
  write_text(in, input);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const std::string bin = binary.string();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(bin.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, bin.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  INFO("spawn " << bin);
  REQUIRE(spawned == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  Ran ran;
  ran.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  ran.out = slurp(out);
  ran.err = slurp(err);
  return ran;
}

inline Ran run_waste(const std::vector<std::string>& args, const std::string& input = "") {
  return run_binary(waste_bin(), args, input);
}

// A waste command that must succeed and print one JSON document.
inline nlohmann::json run_waste_json(const std::vector<std::string>& args) {
  auto ran = run_waste(args);
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  return nlohmann::json::parse(ran.out);
}

// `waste synth --preset tiny --tokenizer` once per process.
inline const fs::path& tokenizer_container() {
  static ScratchDir dir;
  static fs::path model;
  if (model.empty()) {
    REQUIRE_FALSE(dir.path().empty());
    const fs::path out = dir.path() / "tiny.waste";
    const Ran ran = run_waste({"synth", "--preset", "tiny", "--tokenizer", "--out", out.string()});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    model = out;
  }
  return model;
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace waste::test
