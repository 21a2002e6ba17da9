#include "cli/bench/child_process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace waste::cli::bench {

Result<std::filesystem::path> self_executable() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return make_error(Errc::io, "/proc/self/exe: " + ec.message());
  return path;
}

Result<pid_t> spawn_self(const std::vector<std::string>& args, const std::filesystem::path& stdout_path) {
  auto exe = self_executable();
  if (!exe) return std::unexpected(exe.error());
  const std::string bin = exe->string();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(bin.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, bin.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return make_error(Errc::io, "spawn " + bin + ": " + std::strerror(rc));
  return pid;
}

Result<int> wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return make_error(Errc::io, "waitpid " + std::to_string(pid) + ": " + std::strerror(errno));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

ProcessMemory parse_smaps_rollup(const std::string& text) {
  ProcessMemory m;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kb = 0;
    if (!(fields >> key >> kb)) continue;
    const std::uint64_t bytes = kb * 1024;
    if (key == "Rss:") m.rss_bytes = bytes;
    else if (key == "Pss:") m.pss_bytes = bytes;
    else if (key == "Shared_Clean:" || key == "Shared_Dirty:") m.shared_bytes += bytes;
  }
  return m;
}

Result<ProcessMemory> read_process_memory(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/smaps_rollup";
  std::ifstream in(path);
  if (!in) return make_error(Errc::io, path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  ProcessMemory m = parse_smaps_rollup(text.str());
  if (m.rss_bytes == 0) return make_error(Errc::io, path + ": no Rss field (process gone?)");
  return m;
}

Result<double> read_process_cpu_seconds(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text)) return make_error(Errc::io, path + ": cannot read");
  // Fields after "(comm)": state is field 3; utime and stime are fields 14 and 15.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return make_error(Errc::format, path + ": no ')' after the command name");
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);
  }
  return ticks / double(::sysconf(_SC_CLK_TCK));
}

bool drop_page_cache() {
  ::sync();
  std::ofstream out("/proc/sys/vm/drop_caches");
  if (!out) return false;
  out << "3\n";
  out.flush();
  return bool(out);
}

}  // namespace waste::cli::bench
