// End to end on small random checkpoints: a bf16 two-shard Kimi-Linear converts to a container
// the reader opens, whose records pass their checks and CRC and decode to the reported error;
// the bytes do not depend on --jobs; a resumed run equals an uninterrupted one; bad inputs fail
// before any output exists; kill -9 during a layer and rerun gives the same bytes.
#include <catch2/catch.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <set>

#include "compute/convert/converter.hpp"
#include "compute/convert/dtype_decode.hpp"
#include "shared/container/codebooks.hpp"
#include "shared/container/container.hpp"
#include "shared/container/trunk.hpp"
#include "shared/fp16.hpp"
#include "tests/convert/checkpoint_fixture.hpp"
#include "tests/shared/temp_dir.hpp"

extern char** environ;

using namespace waste;
using namespace waste::convert;
namespace fs = std::filesystem;

namespace {

ConvertOptions options(const fs::path& src, const fs::path& out, int jobs = 1) {
  ConvertOptions o;
  o.src = src;
  o.out = out;
  o.jobs = jobs;
  o.rvq.iterations = 4;  // fewer Lloyd steps: same code paths, quicker tests
  return o;
}

std::map<std::string, std::string> dir_bytes(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = test::read_file(e.path());
  }
  return out;
}

}  // namespace

TEST_CASE("a bf16 sharded Kimi-Linear checkpoint converts to a container whose records check out",
          "[convert][e2e]") {
  test::TempDir dir("conv-e2e");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  auto s = convert_checkpoint(options(dir.path() / "src", dir.path() / "out.waste"));
  REQUIRE(s.has_value());
  CHECK(s->complete);
  REQUIRE(s->layers.size() == 3);

  auto info = ContainerInfo::open(dir.path() / "out.waste");
  REQUIRE(info.has_value());
  const Manifest& m = info->manifest;
  CHECK(m.quant.stages == 3);
  CHECK(m.quant.entries == 256);
  CHECK(m.banks.size() == 3);
  CHECK(m.banks.at(2).codebook_base == 9);
  CHECK(info->n_codebooks == 27);
  // Nothing but container files is left.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path() / "out.waste")) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"codebooks.bin", "experts-L1.bin", "experts-L2.bin", "experts-L3.bin",
                                       "manifest.json", "trunk.bin"});

  // Trunk: every tensor here is small, so F32 and bit-equal to the bf16 source.
  auto trunk = Trunk::load(dir.path() / "out.waste", m);
  REQUIRE(trunk.has_value());
  auto ck = Checkpoint::open(dir.path() / "src");
  REQUIRE(ck.has_value());
  const auto* t = trunk->find("model.layers.2.self_attn.kv_b_proj.weight");
  REQUIRE(t != nullptr);
  CHECK(t->info->fmt == TensorFormat::f32);
  auto got = trunk->dequantize(*t);
  REQUIRE(got.has_value());
  auto src = resolve_weight(*ck, "model.layers.2.self_attn.kv_b_proj.weight", {});
  REQUIRE(src.has_value());
  std::vector<float> want(got->size());
  REQUIRE(decode_rows(*src, 0, src->rows(), want).has_value());
  CHECK(*got == want);

  // Experts: header checks, CRC, and the reconstruction error recomputed from the bytes equals
  // the one the converter reported.
  auto books = Codebooks::load(dir.path() / "out.waste" / "codebooks.bin", m.quant);
  REQUIRE(books.has_value());
  const ExpertGeometry& g = info->geometry;
  const std::string bank = test::read_file(dir.path() / "out.waste" / "experts-L2.bin");
  REQUIRE(bank.size() == g.record_bytes * 8);
  double err2 = 0, norm2 = 0;
  for (int e = 0; e < 8; ++e) {
    auto rec = std::as_bytes(std::span(bank.data() + e * g.record_bytes, g.record_bytes));
    REQUIRE(validate_record_header(rec, 2, e, m.quant, g, info->n_codebooks).has_value());
    REQUIRE(verify_record_crc(rec, 2, e, g).has_value());
    ExpertView v = make_expert_view(rec, g);
    auto w = resolve_weight(*ck, "model.layers.2.block_sparse_moe.experts." + std::to_string(e) + ".w3.weight", {});
    REQUIRE(w.has_value());
    std::vector<float> orig(std::size_t(w->rows() * w->cols()));
    REQUIRE(decode_rows(*w, 0, w->rows(), orig).has_value());
    const int k = int(MatrixKind::up), nvr = g.cols[k] / 8;
    for (int r = 0; r < g.rows[k]; ++r) {
      std::uint16_t s16;
      std::memcpy(&s16, v.scales[k] + r, 2);
      for (int vv = 0; vv < nvr; ++vv) {
        for (int d = 0; d < 8; ++d) {
          float sum = 0;
          for (int st = 0; st < 3; ++st) {
            const int id = v.index[k][index_byte_offset(r, vv, st, nvr, 3)];
            sum += books->book(Codebooks::book_id(v.codebook_id, k, st, 3))[std::size_t(id) * 8 + d];
          }
          const double o = orig[std::size_t(r * g.cols[k] + vv * 8 + d)];
          const double diff = o - double(fp16_to_f32(s16)) * sum;
          err2 += diff * diff;
          norm2 += o * o;
        }
      }
    }
  }
  const LayerReport& l2 = s->layers[1];
  CHECK(l2.layer == 2);
  CHECK(std::sqrt(err2 / norm2) == Approx(l2.kinds[1].relative()).epsilon(1e-9));
  CHECK(l2.kinds[1].relative() > 0.01);
  CHECK(l2.kinds[1].relative() < 0.5);
}

TEST_CASE("the container bytes do not depend on the thread count", "[convert][e2e]") {
  test::TempDir dir("conv-jobs");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  REQUIRE(convert_checkpoint(options(dir.path() / "src", dir.path() / "a", 1)).has_value());
  REQUIRE(convert_checkpoint(options(dir.path() / "src", dir.path() / "b", 3)).has_value());
  auto scalar = options(dir.path() / "src", dir.path() / "c", 2);
  scalar.simd = false;
  REQUIRE(convert_checkpoint(scalar).has_value());
  const auto a = dir_bytes(dir.path() / "a");
  CHECK(a == dir_bytes(dir.path() / "b"));
  CHECK(a == dir_bytes(dir.path() / "c"));
  CHECK(a.size() == 6);
}

TEST_CASE("a run split by --layers and resumed ends byte-identical to an uninterrupted run", "[convert][resume]") {
  test::TempDir dir("conv-resume");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  REQUIRE(convert_checkpoint(options(dir.path() / "src", dir.path() / "whole")).has_value());
  auto first = options(dir.path() / "src", dir.path() / "split");
  first.layers = std::vector<int>{2};
  auto partial = convert_checkpoint(first);
  REQUIRE(partial.has_value());
  CHECK_FALSE(partial->complete);
  CHECK(partial->remaining == std::vector<int>{1, 3});
  // Hazard: a partial directory that looks like a container.
  CHECK_FALSE(fs::exists(dir.path() / "split" / "manifest.json"));
  CHECK(fs::exists(dir.path() / "split" / ".convert" / "L2.bank"));
  auto rest = convert_checkpoint(options(dir.path() / "src", dir.path() / "split", 2));
  REQUIRE(rest.has_value());
  CHECK(rest->complete);
  CHECK(rest->layers[1].resumed);
  CHECK(dir_bytes(dir.path() / "whole") == dir_bytes(dir.path() / "split"));
}

TEST_CASE("a missing expert matrix fails before any output is written, naming it", "[convert][errors]") {
  test::TempDir dir("conv-missing");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  auto index = nlohmann::json::parse(test::read_file(dir.path() / "src" / "model.safetensors.index.json"));
  index["weight_map"].erase("model.layers.3.block_sparse_moe.experts.5.w2.weight");
  test::write_file(dir.path() / "src" / "model.safetensors.index.json", index.dump());
  auto s = convert_checkpoint(options(dir.path() / "src", dir.path() / "out"));
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message == "tensor model.layers.3.block_sparse_moe.experts.5.w2.weight is missing from the checkpoint");
  CHECK_FALSE(fs::exists(dir.path() / "out"));
}

TEST_CASE("a misshaped trunk tensor fails before any output is written", "[convert][errors]") {
  test::TempDir dir("conv-shape");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  // Replace shard 1 with one whose copy of a norm has the wrong length.
  auto index = nlohmann::json::parse(test::read_file(dir.path() / "src" / "model.safetensors.index.json"));
  index["weight_map"]["model.norm.weight"] = "extra.safetensors";
  test::write_file(dir.path() / "src" / "model.safetensors.index.json", index.dump());
  test::write_file(dir.path() / "src" / "extra.safetensors",
                   test::safetensors_bytes({test::random_bf16("model.norm.weight", {127}, 1)}));
  auto s = convert_checkpoint(options(dir.path() / "src", dir.path() / "out"));
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message == "checkpoint: tensor model.norm.weight: expected shape [128], found [127]");
  CHECK_FALSE(fs::exists(dir.path() / "out"));
}

TEST_CASE("kill -9 in the middle of a layer, then a rerun, gives the uninterrupted bytes", "[convert][resume]") {
  test::TempDir dir("conv-kill");
  test::write_kimi_checkpoint(dir.path() / "src", "tiny");
  const char* bin_dir = std::getenv("WASTE_BIN_DIR");
  const fs::path waste = fs::path(bin_dir ? bin_dir : WASTE_BINARY_DIR "/cli") / "waste";
  auto run = [&](const fs::path& out, const char* stop_at) {
    std::vector<std::string> args{waste.string(), "convert", (dir.path() / "src").string(), "--out", out.string(), "--quiet"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
    if (stop_at) env_s.push_back(std::string("WASTE_CONVERT_STOP_AT=") + stop_at);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    REQUIRE(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, WUNTRACED) == pid);
    if (WIFSTOPPED(status)) {
      ::kill(pid, SIGKILL);
      REQUIRE(waitpid(pid, &status, 0) == pid);
      return -SIGKILL;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  REQUIRE(run(dir.path() / "whole", nullptr) == 0);
  // Layer 1 finished, layer 2 half written (expert 4 of 8), then kill -9.
  REQUIRE(run(dir.path() / "killed", "2:4") == -SIGKILL);
  CHECK_FALSE(fs::exists(dir.path() / "killed" / "manifest.json"));
  CHECK(fs::exists(dir.path() / "killed" / ".convert" / "L1.bank"));
  CHECK(fs::exists(dir.path() / "killed" / ".convert" / "L2.bank.tmp"));
  REQUIRE(run(dir.path() / "killed", nullptr) == 0);
  CHECK(dir_bytes(dir.path() / "whole") == dir_bytes(dir.path() / "killed"));
}
