// The shared daemon under real commands: `waste chat` processes on one tiny container, the one
// that started the daemon SIGKILLed while another still works.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/segment_names.hpp"
#include "test_control_support.hpp"
#include "test_support.hpp"

using namespace waste;
namespace fs = std::filesystem;

#if defined(WASTE_CLI_BIN) && defined(WASTE_IOSERVER_BIN)

namespace {

// Whole commands start, run and exit under these waits: a longer bound than test::eventually's.
template <class F>
bool eventually(F&& f) {
  return test::eventually(std::forward<F>(f), std::chrono::milliseconds(30000));
}

// `waste ARGS...` with stdin from a pipe we hold (a chat waits on it) and stdout to a file.
struct Command {
  pid_t pid = -1;
  int stdin_fd = -1;
  Command(const std::vector<std::string>& args, const fs::path& out) {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(p[0], 0);
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(o, 1);
      ::dup2(o, 2);
      std::vector<char*> argv;
      std::vector<std::string> store{WASTE_CLI_BIN};
      store.insert(store.end(), args.begin(), args.end());
      for (auto& a : store) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(p[0]);
    stdin_fd = p[1];
  }
  void say(const std::string& text) const { REQUIRE(::write(stdin_fd, text.data(), text.size()) == ssize_t(text.size())); }
  void close_stdin() {
    if (stdin_fd >= 0) ::close(stdin_fd);
    stdin_fd = -1;
  }
  int wait() {
    close_stdin();
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~Command() {
    close_stdin();
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<int> client_pids(const ipc::DaemonInfo& d) {
  std::vector<int> pids;
  auto c = ipc::ControlClient::connect(d.socket);
  if (!c) return pids;
  auto s = c->stats();
  if (!s) return pids;
  for (const auto& e : (*s)["clients"]) pids.push_back(e["pid"].get<int>());
  return pids;
}

fs::path tokenizer_container(const fs::path& dir) {
  // With a tokenizer: a chat reads its turns from stdin, so it stays attached until told.
  const fs::path model = dir / "tiny";
  REQUIRE(test::run_command(std::string(WASTE_CLI_BIN) + " synth --preset tiny --tokenizer --out " + model.string())
              .exit_code == 0);
  return model;
}

std::string reference_chat(const std::vector<std::string>& chat, const fs::path& out, const std::string& input) {
  auto args = chat;
  args.push_back("--in-process");
  Command ref(args, out);
  ref.say(input);
  REQUIRE(ref.wait() == 0);
  return slurp(out);
}

}  // namespace

TEST_CASE("owner killed mid-run: the other command finishes with the right bytes, the daemon then exits clean",
          "[ioserver][control][lifecycle]") {
  test::ScopedRuntimeDir runtime;
  ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
  ::setenv("WASTE_LINGER_MS", "300", 1);
  test::TempDir t("owner");
  const fs::path model = tokenizer_container(t.path);
  const std::string instance = ipc::instance_for_container(model).value();
  const std::vector<std::string> chat{"chat", model.string(), "-n", "12", "-q"};

  // The bytes a chat gives for this input without any daemon.
  const std::string expected = reference_chat(chat, t.path / "ref.out", "hello there\n");
  REQUIRE_FALSE(expected.empty());

  // A starts the container's daemon and waits on its stdin; B attaches to the same daemon.
  auto owner = std::make_unique<Command>(chat, t.path / "a.out");
  std::optional<ipc::DaemonInfo> daemon;
  REQUIRE(eventually([&] {
    daemon = ipc::find_daemon_for_model(model);
    return daemon && client_pids(*daemon) == std::vector<int>{owner->pid};
  }));
  CHECK(daemon->instance == instance);
  Command other(chat, t.path / "b.out");
  REQUIRE(eventually([&] { return client_pids(*daemon).size() == 2; }));

  // Hazard: the starter of the daemon dies without a word (SIGKILL, OOM killer).
  const int owner_pid = owner->pid;
  REQUIRE(::kill(owner_pid, SIGKILL) == 0);
  owner.reset();
  REQUIRE(eventually([&] { return client_pids(*daemon) == std::vector<int>{other.pid}; }));
  REQUIRE(ipc::process_alive(daemon->pid));

  other.say("hello there\n");
  REQUIRE(other.wait() == 0);
  CHECK(slurp(t.path / "b.out") == expected);

  // Last client gone: linger, exit, nothing left.
  CHECK(ipc::wait_process_gone(daemon->pid, 10000));
  CHECK_FALSE(fs::exists(fs::path("/dev/shm") / ipc::arena_segment_name(instance)));
  CHECK_FALSE(fs::exists(fs::path("/dev/shm") / ipc::trunk_segment_name(instance)));
  for (const auto& entry : fs::directory_iterator(ipc::runtime_dir())) FAIL("left behind: " << entry.path());
  ::unsetenv("WASTE_LINGER_MS");
  ::unsetenv("WASTE_IOSERVER");
}

TEST_CASE("a command stopped (SIGSTOP 10 s) keeps its lease and then produces the same bytes",
          "[ioserver][control][lifecycle][slow]") {
  test::ScopedRuntimeDir runtime;
  ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
  ::setenv("WASTE_LINGER_MS", "300", 1);
  test::TempDir t("stopped");
  const fs::path model = tokenizer_container(t.path);
  const std::vector<std::string> chat{"chat", model.string(), "-n", "12", "-q"};
  const std::string expected = reference_chat(chat, t.path / "ref.out", "first turn\nsecond turn\n");

  Command client(chat, t.path / "c.out");
  std::optional<ipc::DaemonInfo> daemon;
  REQUIRE(eventually([&] {
    daemon = ipc::find_daemon_for_model(model);
    return daemon && client_pids(*daemon) == std::vector<int>{client.pid};
  }));
  client.say("first turn\n");
  // Hazard: silent for 10 s (no heartbeat: a paging machine, a debugger), it would have lost its
  // pins under the old 1.5 s heartbeat rule while it still read slot bytes.
  REQUIRE(::kill(client.pid, SIGSTOP) == 0);
  std::this_thread::sleep_for(std::chrono::seconds(10));
  CHECK(client_pids(*daemon) == std::vector<int>{client.pid});
  REQUIRE(::kill(client.pid, SIGCONT) == 0);
  client.say("second turn\n");
  REQUIRE(client.wait() == 0);
  CHECK(slurp(t.path / "c.out") == expected);
  CHECK(ipc::wait_process_gone(daemon->pid, 10000));
  ::unsetenv("WASTE_LINGER_MS");
  ::unsetenv("WASTE_IOSERVER");
}

#endif
