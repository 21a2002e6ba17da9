// `waste convert` as a command: flags, --quiet, --report, --layers parsing, and the progress
// line format.
#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>

#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "compute/convert/expert_format.hpp"
#include "compute/convert/progress.hpp"
#include "compute/kernels/kernels.hpp"
#include "tests/convert/checkpoint_fixture.hpp"
#include "tests/shared/env_var.hpp"
#include "tests/shared/temp_dir.hpp"

extern char** environ;

using namespace waste;
namespace fs = std::filesystem;

namespace {

struct Ran {
  int rc = -1;
  std::string out, err;
};

Ran run_waste(const std::vector<std::string>& args, const fs::path& scratch) {
  const char* bin_dir = std::getenv("WASTE_BIN_DIR");
  std::vector<std::string> all{(fs::path(bin_dir ? bin_dir : WASTE_BINARY_DIR "/cli") / "waste").string()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = (scratch / "stdout").string(), err = (scratch / "stderr").string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  Ran r;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  posix_spawn_file_actions_destroy(&fa);
  r.out = test::read_file(out);
  r.err = test::read_file(err);
  return r;
}

}  // namespace

TEST_CASE("waste convert --quiet prints nothing and --report gives the error per layer and kind", "[convert][cli]") {
  test::TempDir dir("conv-cli");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  auto r = run_waste({"convert", (dir.path() / "src").string(), "--out", (dir.path() / "m.waste").string(), "--quiet",
                      "--report", (dir.path() / "report.json").string(), "--jobs", "2"},
                     dir.path());
  CHECK(r.rc == 0);
  CHECK(r.out.empty());
  CHECK(r.err.empty());
  auto report = nlohmann::json::parse(test::read_file(dir.path() / "report.json"));
  REQUIRE(report["layers"].size() == 3);
  CHECK(report["layers"][0]["layer"] == 1);
  for (const char* kind : {"gate", "up", "down"}) {
    const double e = report["layers"][2]["relative_error"][kind].get<double>();
    CHECK(e > 0.01);
    CHECK(e < 0.5);
  }
  CHECK(report["complete"] == true);
  CHECK(fs::exists(dir.path() / "m.waste" / "manifest.json"));
}

TEST_CASE("waste convert without a terminal prints plain progress lines and a summary", "[convert][cli]") {
  test::TempDir dir("conv-cli-plain");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  auto r = run_waste({"convert", (dir.path() / "src").string(), "--out", (dir.path() / "m.waste").string()}, dir.path());
  CHECK(r.rc == 0);
  CHECK(r.out.starts_with("wrote " + (dir.path() / "m.waste").string() + ": 3 MoE layers"));
  CHECK(r.err.find("layers 3/3") != std::string::npos);
  CHECK(r.err.find("experts of layer 2 8/8") != std::string::npos);
  CHECK(r.err.find("trunk tensors") != std::string::npos);
  CHECK(r.err.find('\r') == std::string::npos);  // no bar redraws when stderr is a file
  // One line per phase: three expert layers, the layers phase, the trunk.
  CHECK(r.err.starts_with("experts of layer 1 8/8\nexperts of layer 2 8/8\nexperts of layer 3 8/8\nlayers 3/3\n"
                          "trunk tensors "));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 5);
}

TEST_CASE("waste convert refuses bad flags with exit code 2", "[convert][cli]") {
  test::TempDir dir("conv-cli-bad");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  const std::string src = (dir.path() / "src").string(), out = (dir.path() / "m.waste").string();
  auto layers = run_waste({"convert", src, "--out", out, "--layers", "1,x"}, dir.path());
  CHECK(layers.rc == 2);
  CHECK(layers.err == "waste convert: --layers 1,x: expected a list like 1,3,5-7\n");
  auto dense = run_waste({"convert", src, "--out", out, "--layers", "0"}, dir.path());
  CHECK(dense.rc == 2);
  CHECK(dense.err == "waste convert: --layers: layer 0 is not a MoE layer\n");
  auto vq4p = run_waste({"convert", src, "--out", out, "--index-bits", "6"}, dir.path());
  CHECK(vq4p.rc == 2);
  CHECK(vq4p.err == "waste convert: --index-bits 6 needs --stages 4 --entries 64 (VQ4P)\n");
  auto engram = run_waste({"convert", src, "--out", out, "--engram-bits", "6"}, dir.path());
  CHECK(engram.rc == 2);
  CHECK(engram.err == "waste convert: --engram-bits must be one of 4, 8\n");
  CHECK_FALSE(fs::exists(dir.path() / "m.waste" / "manifest.json"));
  auto missing = run_waste({"convert", (dir.path() / "nope").string(), "--out", out}, dir.path());
  CHECK(missing.rc == 1);
  CHECK(missing.err.starts_with("waste convert: "));
}

TEST_CASE("VQ4P conversion (4 stages x 64 entries, 6-bit indices) writes fmt 8 records", "[convert][cli]") {
  test::TempDir dir("conv-cli-vq4p");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  auto r = run_waste({"convert", (dir.path() / "src").string(), "--out", (dir.path() / "m.waste").string(), "--quiet",
                      "--stages", "4", "--entries", "64", "--index-bits", "6"},
                     dir.path());
  REQUIRE(r.rc == 0);
  auto v = run_waste({"verify", (dir.path() / "m.waste").string()}, dir.path());
  CHECK(v.rc == 0);
  auto m = nlohmann::json::parse(test::read_file(dir.path() / "m.waste" / "manifest.json"));
  CHECK(m["expert_quant"]["index_bits"] == 6);
  CHECK(m["expert_quant"]["fmt"] == "VQ4P");
  const std::string bank = test::read_file(dir.path() / "m.waste" / "experts-L1.bin");
  REQUIRE(bank.size() > 48);
  CHECK(int(std::uint8_t(bank[8])) == 8);
}

TEST_CASE("progress lines carry phase, count, rate and ETA", "[convert][cli]") {
  CHECK(convert::Progress::format("layers", 1, 4, 2.0, false) == "layers 1/4  0.5/s  ETA 6s");
  CHECK(convert::Progress::format("experts", 8, 8, 4.0, true) == "[########################] experts 8/8  2.0/s  ETA 0s");
  CHECK(convert::Progress::format("trunk", 0, 10, 0.0, true) == "[                        ] trunk 0/10  0.0/s  ETA 0s");
}

namespace {
std::string plain_progress_of(const std::function<void(std::FILE*)>& run) {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  run(f);
  std::rewind(f);
  std::string text;
  for (int ch = std::fgetc(f); ch != EOF; ch = std::fgetc(f)) text.push_back(char(ch));
  std::fclose(f);
  return text;
}
}  // namespace

TEST_CASE("progress on a stream that is not a terminal prints one line per phase, not one per update",
          "[convert][cli]") {
  // 16 updates of one phase: one line when it ends (before: a line per 10%, 600 lines in a log).
  CHECK(plain_progress_of([](std::FILE* f) {
          convert::Progress bar(convert::ProgressMode::plain, "experts of layer 3", 16, f);
          for (int i = 0; i < 16; ++i) bar.advance();
        }) == "experts of layer 3 16/16\n");
  // Nested phases, as the converter runs them; an aborted phase shows how far it got.
  CHECK(plain_progress_of([](std::FILE* f) {
          convert::Progress layers(convert::ProgressMode::plain, "layers", 2, f);
          for (int l = 1; l <= 2; ++l) {
            convert::Progress experts(convert::ProgressMode::plain, "experts of layer " + std::to_string(l), 384, f);
            experts.advance(l == 1 ? 384 : 100);
            layers.advance();
          }
        }) == "experts of layer 1 384/384\nexperts of layer 2 100/384\nlayers 2/2\n");
  CHECK(plain_progress_of([](std::FILE* f) {
          convert::Progress quiet(convert::ProgressMode::quiet, "trunk tensors", 10, f);
          quiet.advance(10);
        }).empty());
}

TEST_CASE("waste convert refuses a disk without room before writing, naming both sizes", "[convert][cli]") {
  // The output directory is a 256 KiB tmpfs in a private mount namespace of the child (root here,
  // as in CI); where namespaces are not allowed the test says so and checks nothing else.
  test::TempDir dir("conv-disk");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  const fs::path mnt = dir.path() / "small";
  fs::create_directories(mnt);
  const char* bin_dir = std::getenv("WASTE_BIN_DIR");
  const fs::path waste = fs::path(bin_dir ? bin_dir : WASTE_BINARY_DIR "/cli") / "waste";
  const fs::path err = dir.path() / "stderr";
  const std::string cmd = "unshare -m sh -c 'mount --make-rprivate / && mount -t tmpfs -o size=256k tmpfs " +
                          mnt.string() + " || exit 77; exec " + waste.string() + " convert " +
                          (dir.path() / "src").string() + " --out " + (mnt / "m.waste").string() +
                          " --quiet; ' 2> " + err.string();
  const int status = std::system(cmd.c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::string text = test::read_file(err);
  if (rc == 77) {
    WARN("no private mount namespace here: " << text);
    return;
  }
  INFO(text);
  CHECK(rc == 1);
  const std::string prefix = "waste convert: not enough disk space in " + (mnt / "m.waste").string() +
                             ": the container needs ";
  REQUIRE(text.starts_with(prefix));
  const std::string rest = text.substr(prefix.size());
  std::uint64_t need = 0, avail = 0;
  REQUIRE(std::sscanf(rest.c_str(), "%lu bytes, %lu are available", &need, &avail) == 2);
  CHECK(avail < need);
  CHECK(avail <= 256u * 1024u);
}

namespace {

std::string manifest_fmt(const fs::path& container) {
  return nlohmann::json::parse(test::read_file(container / "manifest.json"))["expert_quant"]["fmt"].get<std::string>();
}

}  // namespace

TEST_CASE("waste convert's default expert format follows the CPU's kernels, --experts picks one, the summary names it",
          "[convert][cli]") {
  test::TempDir dir("conv-cli-format");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  const std::string src = (dir.path() / "src").string();
  // auto: VQ4P where the table looks VQ4P up from registers (avx2, avx512, avx512vbmi), VQ3R elsewhere.
  for (const kernels::KernelTable* kt : kernels::supported()) {
    test::EnvVar isa("WASTE_FORCE_ISA", std::string{kt->isa});
    const fs::path out = dir.path() / (std::string("auto-") + kt->isa + ".waste");
    auto r = run_waste({"convert", src, "--out", out.string()}, dir.path());
    INFO(kt->isa << ": " << r.err);
    REQUIRE(r.rc == 0);
    const std::string fmt = kt->vq4p_from_registers ? "VQ4P" : "VQ3R";
    CHECK(r.out.starts_with("wrote " + out.string() + ": 3 MoE layers, " + fmt + " experts (default on " + kt->isa +
                            "), "));
    CHECK(manifest_fmt(out) == fmt);
  }
  // An explicit format whatever the CPU.
  test::EnvVar generic("WASTE_FORCE_ISA", std::string{"generic"});
  for (const auto& [name, fmt] : {std::pair{"vq4p", "VQ4P"}, std::pair{"vq3r", "VQ3R"}, std::pair{"vq2r", "VQ2R"}}) {
    const fs::path out = dir.path() / (std::string(name) + ".waste");
    auto r = run_waste({"convert", src, "--out", out.string(), "--experts", name}, dir.path());
    INFO(name << ": " << r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.out.starts_with("wrote " + out.string() + ": 3 MoE layers, " + fmt + " experts, "));
    CHECK(manifest_fmt(out) == fmt);
  }
  // The fine-grained flags still work alone (no format words), but not beside --experts.
  auto flags = run_waste({"convert", src, "--out", (dir.path() / "flags.waste").string(), "--stages", "2"}, dir.path());
  REQUIRE(flags.rc == 0);
  CHECK(flags.out.starts_with("wrote " + (dir.path() / "flags.waste").string() + ": 3 MoE layers, "));
  CHECK(flags.out.find("experts") == std::string::npos);
  CHECK(manifest_fmt(dir.path() / "flags.waste") == "VQ2R");
  const std::string out = (dir.path() / "bad.waste").string();
  auto both = run_waste({"convert", src, "--out", out, "--experts", "vq4p", "--stages", "4"}, dir.path());
  CHECK(both.rc == 2);
  CHECK(both.err == "waste convert: --experts and --stages/--entries/--index-bits: give one or the other\n");
  auto bad = run_waste({"convert", src, "--out", out, "--experts", "vq5"}, dir.path());
  CHECK(bad.rc == 2);
  CHECK(bad.err == "waste convert: --experts: 'vq5' is not an expert format (auto, vq3r, vq4p or vq2r)\n");
  CHECK_FALSE(fs::exists(dir.path() / "bad.waste" / "manifest.json"));
}
