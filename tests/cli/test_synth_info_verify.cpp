// `waste synth`, `waste info`, `waste verify` as a user runs them (the built binary).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct Run {
  int rc = -1;
  std::string out;  // stdout and stderr together
};

std::string waste_bin() {
  const char* dir = std::getenv("WASTE_BIN_DIR");
  return std::string(dir ? dir : WASTE_BINARY_DIR "/cli") + "/waste";
}

Run run(const std::string& args) {
  Run r;
  const std::string cmd = waste_bin() + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

struct Scratch {
  std::filesystem::path dir;
  Scratch() {
    static int counter = 0;
    dir = std::filesystem::temp_directory_path() /
          ("waste-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(s.data(), std::streamsize(s.size()));
}

}  // namespace

TEST_CASE("waste synth --preset tiny, then info and verify agree with the manifest", "[cli][container]") {
  Scratch s;
  const auto model = (s.dir / "tiny.waste").string();
  auto synth = run("synth --preset tiny --out " + model + " --seed 9");
  INFO(synth.out);
  REQUIRE(synth.rc == 0);

  auto info = run("info --json " + model);
  INFO(info.out);
  REQUIRE(info.rc == 0);
  const auto j = nlohmann::json::parse(info.out);
  const auto manifest = nlohmann::json::parse(slurp(s.dir / "tiny.waste" / "manifest.json"));
  REQUIRE(j["arch"] == "kimi-linear");
  REQUIRE(j["layer_kinds"] == nlohmann::json({"KDA+dense", "KDA+MoE", "MLA+MoE", "KDA+MoE"}));
  REQUIRE(j["record_bytes"] == 12288);
  REQUIRE(j["expert_bytes_per_token"] == 12288 * 2 * 3);
  REQUIRE(j["experts"] == 8);
  REQUIRE(j["top_k"] == 2);
  // Parameter counts recomputed from the manifest: trunk elements + 3 routed matrices per expert.
  std::uint64_t trunk = 0, embed = 0;
  std::map<int, int> per_fmt;
  for (const auto& t : manifest["trunk"]) {
    std::uint64_t n = 1;
    for (const auto& d : t["shape"]) n *= d.get<std::uint64_t>();
    trunk += n;
    if (t["name"].get<std::string>().find("embed_tokens") != std::string::npos) embed += n;
    per_fmt[t["fmt"].get<int>()]++;
  }
  const std::uint64_t expert = 3 * 64 * 128;
  REQUIRE(j["params_total"] == trunk + 3 * 8 * expert);
  REQUIRE(j["params_active"] == trunk - embed + 3 * 2 * expert);
  REQUIRE(j["trunk_formats"]["F32"]["tensors"] == per_fmt[0]);
  REQUIRE(j["trunk_formats"]["Q8G"]["tensors"] == per_fmt[2]);
  REQUIRE(j["trunk_formats"]["Q4G"]["tensors"] == per_fmt[3]);
  REQUIRE(j["tokenizer"] == false);

  auto text = run("info " + model);
  REQUIRE(text.rc == 0);
  REQUIRE(text.out.find("0 KDA+dense, 1 KDA+MoE, 2 MLA+MoE, 3 KDA+MoE") != std::string::npos);
  REQUIRE(text.out.find("12288 bytes") != std::string::npos);

  auto verify = run("verify " + model);
  INFO(verify.out);
  REQUIRE(verify.rc == 0);
  REQUIRE(verify.out == model + ": " + std::to_string(manifest["trunk"].size()) +
                            " trunk tensors, 24 expert records in 3 banks checked; 0 damaged\n");
}

TEST_CASE("waste verify lists exactly the damaged records", "[cli][container]") {
  Scratch s;
  const auto model = (s.dir / "m").string();
  REQUIRE(run("synth --preset tiny --out " + model).rc == 0);
  const auto l1 = s.dir / "m" / "experts-L1.bin";
  const auto l3 = s.dir / "m" / "experts-L3.bin";
  std::string b1 = slurp(l1), b3 = slurp(l3);
  b1[3 * 12288 + 500] = char(b1[3 * 12288 + 500] ^ 1);  // payload: only the crc sees it
  std::memcpy(b3.data() + 5 * 12288, "JUNK", 4);         // magic
  spit(l1, b1);
  spit(l3, b3);
  auto verify = run("verify " + model);
  INFO(verify.out);
  REQUIRE(verify.rc == 1);
  std::vector<std::string> lines;
  for (std::size_t pos = 0, nl; (nl = verify.out.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    lines.push_back(verify.out.substr(pos, nl - pos));
  }
  REQUIRE(lines.size() == 3);
  REQUIRE(lines[0].starts_with("expert 3 of layer 1: crc32 mismatch (stored 0x"));
  REQUIRE(lines[1] == "expert 5 of layer 3: bad magic 0x4B4E554A");
  REQUIRE(lines[2].ends_with("24 expert records in 3 banks checked; 2 damaged"));
}

TEST_CASE("waste synth options: formats, layers, tokenizer, bad values", "[cli][container]") {
  Scratch s;
  const auto k3 = (s.dir / "k3").string();
  auto synth = run("synth --preset tiny-k3 --layers 4 --experts vq4p --trunk q8g --tokenizer --out " + k3);
  INFO(synth.out);
  REQUIRE(synth.rc == 0);
  auto j = nlohmann::json::parse(run("info --json " + k3).out);
  REQUIRE(j["arch"] == "kimi-k3");
  REQUIRE(j["layers"] == 4);
  REQUIRE(j["expert_format"] == "VQ4P");
  REQUIRE(j["expert_index_bits"] == 6);
  REQUIRE(j["trunk_formats"].contains("Q8G"));
  REQUIRE_FALSE(j["trunk_formats"].contains("Q4G"));
  REQUIRE(j["tokenizer"] == true);
  REQUIRE(j["specials"] == true);
  // vocab = the tokenizer's ids: highest special id + 1.
  const auto specials = nlohmann::json::parse(slurp(s.dir / "k3" / "specials.json"));
  REQUIRE(j["vocab"] == specials.back()["id"].get<int>() + 1);
  REQUIRE(run("verify " + k3).rc == 0);

  auto bad = run("synth --preset tiny --experts vq9 --out " + (s.dir / "x").string());
  REQUIRE(bad.rc != 0);
  auto missing = run("synth --preset no-such-preset --out " + (s.dir / "y").string());
  REQUIRE(missing.rc == 2);
  REQUIRE(missing.out.find("no preset \"no-such-preset\"") != std::string::npos);
  auto layers = run("synth --preset tiny --layers 9 --out " + (s.dir / "z").string());
  REQUIRE(layers.rc == 2);
  REQUIRE(layers.out == "waste synth: --layers 9 is out of range 1..4\n");
  auto not_a_model = run("info " + (s.dir / "nothing").string());
  REQUIRE(not_a_model.rc == 1);
}

TEST_CASE("waste info shows the DeepSeek-V3 family's rotary, routing groups and ignored MTP", "[cli][container]") {
  Scratch s;
  const auto v3 = (s.dir / "v3").string();
  auto synth = run("synth --preset tiny-v3 --layers 2 --out " + v3);
  INFO(synth.out);
  REQUIRE(synth.rc == 0);
  auto text = run("info " + v3);
  INFO(text.out);
  REQUIRE(text.rc == 0);
  REQUIRE(text.out.find("rotary:       theta 10000, YaRN factor 40 (original 4096, beta_fast 32, beta_slow 1), "
                        "softmax scale x1.8739\n") != std::string::npos);
  REQUIRE(text.out.find("routing:      sigmoid + e_score_correction_bias (selection only), 4 groups of 4 (best 2 "
                        "kept), renormalized, x2.5\n") != std::string::npos);
  REQUIRE(text.out.find("mtp:          1 multi-token-prediction layer in the source, ignored (not converted, never "
                        "run)\n") != std::string::npos);
  auto j = nlohmann::json::parse(run("info --json " + v3).out);
  REQUIRE(j["rotary"]["enabled"] == true);
  REQUIRE(j["rotary"]["theta"] == 10000.0);
  REQUIRE(j["rotary"]["yarn_factor"] == 40.0);
  REQUIRE(j["routing"]["n_group"] == 4);
  REQUIRE(j["routing"]["topk_group"] == 2);
  REQUIRE(j["mtp_layers"] == 1);
  REQUIRE(j["mtp_ignored"] == true);

  // Kimi-Linear stays NoPE, with no group limit.
  const auto tiny = (s.dir / "tiny").string();
  REQUIRE(run("synth --preset tiny --out " + tiny).rc == 0);
  auto kimi = run("info " + tiny);
  REQUIRE(kimi.out.find("rotary:       none (NoPE: the qk_rope dims pass unrotated)\n") != std::string::npos);
  REQUIRE(kimi.out.find(", no group limit, renormalized, x2\n") != std::string::npos);
  REQUIRE(kimi.out.find("mtp:") == std::string::npos);
}

TEST_CASE("waste info shows GLM's mHC streams, SwiGLU clamp and indexer keys", "[cli][container]") {
  Scratch s;
  const auto glm = (s.dir / "glm").string();
  auto synth = run("synth --preset tiny-glm --out " + glm);
  INFO(synth.out);
  REQUIRE(synth.rc == 0);
  auto text = run("info " + glm);
  INFO(text.out);
  REQUIRE(text.rc == 0);
  CHECK(text.out.find("architecture: glm5-next") != std::string::npos);
  CHECK(text.out.find("residual:     mHC, 4 streams, 20 Sinkhorn iterations (eps 1e-06)\n") != std::string::npos);
  CHECK(text.out.find("swiglu clamp: 0.75 (gate <= limit, |up| <= limit)\n") != std::string::npos);
  CHECK(text.out.find("indexer:      DSA k-pool, 2 heads x 32, top 16 positions, pools of 4 + tail\n") !=
        std::string::npos);
  auto j = nlohmann::json::parse(run("info --json " + glm).out);
  CHECK(j["mhc"]["streams"] == 4);
  CHECK(j["mhc"]["sinkhorn_iters"] == 20);
  CHECK(j["swiglu_limit"] == 0.75);
  CHECK(j["indexer"]["topk"] == 16);
  CHECK(j["indexer"]["kpool"] == 4);
  CHECK(j["indexer"]["n_heads"] == 2);
  CHECK(j["indexer"]["head_dim"] == 32);

  // Other families print none of these lines.
  const auto tiny = (s.dir / "tiny").string();
  REQUIRE(run("synth --preset tiny --out " + tiny).rc == 0);
  auto kimi = run("info " + tiny);
  CHECK(kimi.out.find("residual:") == std::string::npos);
  CHECK(kimi.out.find("swiglu clamp:") == std::string::npos);
  CHECK(kimi.out.find("indexer:") == std::string::npos);
}
