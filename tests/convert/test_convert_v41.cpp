// `waste convert` on a small random DeepSeek-V4.1 checkpoint in the release's tensor names
// (vendor names, fp8 e4m3 with 32x32 UE8M0 `.scale` blocks, I8-packed E2M1 experts, BF16
// indexer and compressor, F32 sinks and mHC, Engram tables fp8 with a UE8M0 per 32 columns, DSpark
// draft tensors and a vision tower that are left out) and a DeepSeek-kind tokenizer.json. What
// the container holds is checked from outside: the manifest's config keys, the trunk's names,
// shapes and values, the expert records, engram-L{n}.bin rows against the source within the
// quantization bound at 8 and 4 bits, engram.json and engram-tokmap.bin; and a resumed Engram
// table equals an uninterrupted one byte for byte.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>

#include "compute/api/engine.hpp"
#include "compute/convert/converter.hpp"
#include "compute/convert/dtype_decode.hpp"
#include "compute/convert/engram_table.hpp"
#include "compute/convert/hf_tokenizer.hpp"
#include "compute/convert/v41_engram.hpp"
#include "compute/engram/engram_json.hpp"
#include "compute/engram/primes.hpp"
#include "compute/tokenizer/pre_tokenizer.hpp"
#include "shared/container/codebooks.hpp"
#include "shared/container/container.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/container/trunk.hpp"
#include "tests/convert/checkpoint_fixture.hpp"
#include "tests/shared/temp_dir.hpp"

using namespace waste;
using namespace waste::convert;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kHidden = 64, kLayers = 4, kVocab = 302, kExperts = 4, kMoe = 32, kHeads = 4, kHeadDim = 32;
constexpr int kQLora = 24, kOGroups = 2, kOLora = 16, kHc = 2, kIdxHeads = 2, kIdxDim = 16, kEngDim = 32;

std::uint8_t rnd8(const std::string& name, std::size_t i) {
  std::uint64_t key = 99;
  for (char ch : name) key = test::fixture_mix(key ^ std::uint8_t(ch));
  return std::uint8_t(test::fixture_mix(key + i) >> 56);
}

// F8_E4M3 codes (NaN codes avoided) with UE8M0 scales in 2^-7..2^-1, blocks rows_per x 32.
void add_fp8(std::vector<test::StTensor>& all, const std::string& base, std::int64_t rows, std::int64_t cols,
             std::int64_t rows_per = 32) {
  test::StTensor w{base + ".weight", "F8_E4M3", {rows, cols}, {}};
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    std::uint8_t b = rnd8(w.name, std::size_t(i));
    if ((b & 0x7F) == 0x7F) b ^= 0x01;
    w.bytes.push_back(b);
  }
  const std::int64_t sr = (rows + rows_per - 1) / rows_per, sc = (cols + 31) / 32;
  test::StTensor s{base + ".scale", "F8_E8M0", {sr, sc}, {}};
  for (std::int64_t i = 0; i < sr * sc; ++i) s.bytes.push_back(std::uint8_t(120 + rnd8(s.name, std::size_t(i)) % 7));
  all.push_back(std::move(w));
  all.push_back(std::move(s));
}

// I8-packed E2M1 [rows, cols/2] with a UE8M0 scale per 32 columns.
void add_fp4(std::vector<test::StTensor>& all, const std::string& base, std::int64_t rows, std::int64_t cols) {
  test::StTensor w{base + ".weight", "I8", {rows, cols / 2}, {}};
  for (std::int64_t i = 0; i < rows * cols / 2; ++i) w.bytes.push_back(rnd8(w.name, std::size_t(i)));
  test::StTensor s{base + ".scale", "F8_E8M0", {rows, cols / 32}, {}};
  for (std::int64_t i = 0; i < rows * cols / 32; ++i) {
    s.bytes.push_back(std::uint8_t(118 + rnd8(s.name, std::size_t(i)) % 5));
  }
  all.push_back(std::move(w));
  all.push_back(std::move(s));
}

void add_f32(std::vector<test::StTensor>& all, const std::string& name, std::vector<std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  test::StTensor t{name, "F32", shape, {}};
  t.bytes.resize(std::size_t(n) * 4);
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = float(rnd8(name, std::size_t(i))) / 128.0f - 1.0f;
    std::memcpy(&t.bytes[std::size_t(i) * 4], &v, 4);
  }
  all.push_back(std::move(t));
}

void add_bf16(std::vector<test::StTensor>& all, const std::string& name, std::vector<std::int64_t> shape) {
  all.push_back(test::random_bf16(name, std::move(shape), 11));
}

// GPT-2's byte escape, written here (independently of the converter).
std::string escape(std::string_view bytes) {
  auto printable = [](int x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; };
  std::string out;
  for (unsigned char b : bytes) {
    char32_t cp = b;
    if (!printable(b)) {
      int n = 0;
      for (int x = 0; x < b; ++x) n += printable(x) ? 0 : 1;
      cp = 256 + char32_t(n);
    }
    if (cp < 0x80) {
      out += char(cp);
    } else {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

const std::string kBos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const std::string kEos = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const std::string kPad = "<\xEF\xBD\x9C\xE2\x96\x81pad\xE2\x96\x81\xEF\xBD\x9C>";
const std::string kUser = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
const std::string kAssistant = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";

// BOS/EOS/PAD at ids 0..2 inside the BPE vocabulary, byte b at b + 3, merges 259..261, two
// specials at 300 and 301 (ids 262..299 unused).
json tokenizer_json() {
  json vocab = json::object();
  vocab[kBos] = 0;
  vocab[kEos] = 1;
  vocab[kPad] = 2;
  for (int b = 0; b < 256; ++b) vocab[escape(std::string(1, char(b)))] = b + 3;
  const std::vector<std::pair<std::string, std::string>> merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}};
  json m = json::array();
  int id = 259;
  for (const auto& [a, b] : merges) {
    vocab[escape(a + b)] = id++;
    m.push_back(json::array({escape(a), escape(b)}));
  }
  json splits = json::array();
  for (const auto pattern : tokenizer::kDeepSeekSplits) {
    splits.push_back({{"type", "Split"}, {"pattern", {{"Regex", std::string(pattern)}}}, {"behavior", "Isolated"},
                      {"invert", false}});
  }
  splits.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  json added = json::array();
  for (const auto& [aid, text] : std::vector<std::pair<int, std::string>>{
           {0, kBos}, {1, kEos}, {2, kPad}, {300, kUser}, {301, kAssistant}}) {
    added.push_back({{"id", aid}, {"content", text}, {"special", true}});
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", splits}}},
          {"model", {{"type", "BPE"}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", m}}}};
}

// Rows of the two Engram tables: the sums of their bucket primes (engram_vocab_size 50, n-grams
// 2..3, 2 heads): 53 + 59 + 61 + 67 and 71 + 73 + 79 + 83.
constexpr std::int64_t kEngRows[2] = {240, 306};

std::int64_t compressed_vocab_size() {
  auto hf = convert_hf_tokenizer(tokenizer_json().dump(), "tokenizer.json");
  REQUIRE(hf);
  auto texts = engram_token_texts(*hf);
  REQUIRE(texts);
  auto map = engram::derive_compressed_token_map(*texts);
  REQUIRE(map);
  return map->size;
}

json text_config() {
  return {{"model_type", "deepseek_v41_text"}, {"vocab_size", kVocab}, {"hidden_size", kHidden},
          {"num_hidden_layers", kLayers}, {"num_attention_heads", kHeads}, {"num_key_value_heads", 1},
          {"head_dim", kHeadDim}, {"q_lora_rank", kQLora}, {"qk_rope_head_dim", 8}, {"o_groups", kOGroups},
          {"o_lora_rank", kOLora}, {"sliding_window", 8}, {"compress_ratios", {0, 2, 2, 1, 0}},
          {"kv_source_layer_ids", {1, 3}}, {"index_source_layer_ids", {1, 3}}, {"candidate_source_layer_id", 3},
          {"candidate_topk_blocks", 4}, {"candidate_block_size", 2}, {"index_n_heads", kIdxHeads},
          {"index_head_dim", kIdxDim}, {"index_topk", 8}, {"moe_intermediate_size", kMoe},
          {"n_routed_experts", kExperts}, {"n_shared_experts", 1}, {"num_experts_per_tok", 2},
          {"scoring_func", "sqrtsoftplus"}, {"norm_topk_prob", true}, {"routed_scaling_factor", 1.5},
          {"topk_method", "noaux_tc"}, {"swiglu_limit", 10.0}, {"hc_mult", kHc}, {"hc_sinkhorn_iters", 20},
          {"hc_eps", 1e-6}, {"rope_theta", 10000.0}, {"compress_rope_theta", 160000.0},
          {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}, {"beta_fast", 32}, {"beta_slow", 1},
                            {"original_max_position_embeddings", 64}}},
          {"max_position_embeddings", 256}, {"engram_layer_ids", {1, 2}},
          {"engram_num_embeddings", {kEngRows[0], kEngRows[1]}}, {"engram_vocab_size", 50},
          {"engram_max_ngram_size", 3}, {"engram_n_heads", 2}, {"engram_head_dim", kEngDim}, {"engram_pad_id", 2},
          {"engram_compressed_vocab_size", compressed_vocab_size()}, {"num_nextn_predict_layers", 1},
          {"rms_norm_eps", 1e-20}, {"bos_token_id", 0}, {"eos_token_id", 1}};
}

void write_v41_checkpoint(const fs::path& dir, const std::set<std::string>& skip = {}) {
  fs::create_directories(dir);
  json config = {{"architectures", {"DeepseekV41ForCausalLM"}},
                 {"model_type", "deepseek_v41"},
                 {"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                                          {"weight_block_size", {32, 32}}}},
                 {"vision_config", {{"model_type", "deepseek_v41_vision"}, {"hidden_size", 8}}},
                 {"text_config", text_config()}};
  test::write_file(dir / "config.json", config.dump(1));
  test::write_file(dir / "tokenizer.json", tokenizer_json().dump());

  std::vector<test::StTensor> all;
  add_bf16(all, "embed.weight", {kVocab, kHidden});
  add_bf16(all, "head.weight", {kVocab, kHidden});
  add_bf16(all, "norm.weight", {kHidden});
  add_f32(all, "hc_head_fn", {kHc, kHc * kHidden});
  add_f32(all, "hc_head_base", {kHc});
  add_f32(all, "hc_head_scale", {1});
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add_bf16(all, p + "attn_norm.weight", {kHidden});
    add_bf16(all, p + "ffn_norm.weight", {kHidden});
    add_fp8(all, p + "attn.wq_a", kQLora, kHidden);
    add_bf16(all, p + "attn.q_norm.weight", {kQLora});
    add_fp8(all, p + "attn.wq_b", kHeads * kHeadDim, kQLora);
    add_fp8(all, p + "attn.wkv", kHeadDim, kHidden);
    add_bf16(all, p + "attn.kv_norm.weight", {kHeadDim});
    add_fp8(all, p + "attn.wo_a", kOGroups * kOLora, kHeads * kHeadDim / kOGroups);
    add_fp8(all, p + "attn.wo_b", kHidden, kOGroups * kOLora);
    add_f32(all, p + "attn.attn_sink", {kHeads});
    if (l == 1 || l == 3) {
      add_bf16(all, p + "attn.compressor.wkv.weight", {kHeadDim, kHidden});
      add_bf16(all, p + "attn.compressor.norm.weight", {kHeadDim});
      if (l == 1) add_bf16(all, p + "attn.compressor.wgate.weight", {kHeadDim, kHidden});
      add_bf16(all, p + "attn.indexer.wk.weight", {kIdxDim, kHeadDim});
      add_bf16(all, p + "attn.indexer.k_norm.weight", {kIdxDim});
      add_bf16(all, p + "attn.indexer.wq_b.weight", {kIdxHeads * kIdxDim, kQLora});
      add_bf16(all, p + "attn.indexer.weights_proj.weight", {kIdxHeads, kHidden});
    }
    for (const char* site : {"attn", "ffn"}) {
      add_f32(all, p + "hc_" + site + "_fn", {(2 + kHc) * kHc, kHc * kHidden});
      add_f32(all, p + "hc_" + site + "_base", {(2 + kHc) * kHc});
      add_f32(all, p + "hc_" + site + "_scale", {3});
    }
    add_bf16(all, p + "ffn.gate.weight", {kExperts, kHidden});
    add_f32(all, p + "ffn.gate.bias", {kExperts});
    add_f32(all, p + "ffn.gate.bias_vl", {kExperts});
    add_fp8(all, p + "ffn.shared_experts.w1", kMoe, kHidden);
    add_fp8(all, p + "ffn.shared_experts.w3", kMoe, kHidden);
    add_fp8(all, p + "ffn.shared_experts.w2", kHidden, kMoe);
    for (int e = 0; e < kExperts; ++e) {
      const std::string x = p + "ffn.experts." + std::to_string(e) + ".";
      add_fp4(all, x + "w1", kMoe, kHidden);
      add_fp4(all, x + "w3", kMoe, kHidden);
      add_fp4(all, x + "w2", kHidden, kMoe);
    }
    if (l == 1 || l == 2) {
      add_fp8(all, p + "engram.embed", kEngRows[l - 1], kEngDim, 1);
      add_fp8(all, p + "engram.wkv", kHidden * (kHc + 1), 2 * 2 * kEngDim);
      add_bf16(all, p + "engram.q_weight", {kHc, kHidden});
      add_bf16(all, p + "engram.k_weight", {kHc, kHidden});
    }
  }
  // DSpark draft stage and vision tower: left out.
  add_bf16(all, "mtp.0.main_proj.weight", {kHidden, 3 * kHidden});
  add_fp8(all, "mtp.0.attn.wq_a", kQLora, kHidden);
  add_fp4(all, "mtp.0.ffn.experts.0.w1", kMoe, kHidden);
  add_bf16(all, "vision.patch_embed.weight", {8, 12});
  add_bf16(all, "aligner.w1.weight", {kHidden, 72});
  add_bf16(all, "image_newline", {kHidden});

  std::erase_if(all, [&](const test::StTensor& x) { return skip.count(x.name) > 0; });
  std::vector<test::StTensor> shard[2];
  json map = json::object();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const int s = int(i % 2);
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    map[all[i].name] = file;
    shard[s].push_back(std::move(all[i]));
  }
  test::write_file(dir / "model-00001-of-00002.safetensors", test::safetensors_bytes(shard[0]));
  test::write_file(dir / "model-00002-of-00002.safetensors", test::safetensors_bytes(shard[1]));
  const json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", map}};
  test::write_file(dir / "model.safetensors.index.json", index.dump(1));
}

ConvertOptions options(const fs::path& src, const fs::path& out, int engram_bits) {
  ConvertOptions o;
  o.src = src;
  o.out = out;
  o.jobs = 1;
  o.rvq.iterations = 4;
  o.engram_bits = engram_bits;
  o.engram_chunk_pages = 1;  // several resumable chunks even on these small tables
  return o;
}

std::vector<float> decoded(const Checkpoint& ck, const std::string& name, BlockSize block) {
  auto w = resolve_weight(ck, name, block);
  REQUIRE(w);
  std::vector<float> v(std::size_t(w->rows() * w->cols()));
  REQUIRE(decode_rows(*w, 0, w->rows(), v));
  return v;
}

}  // namespace

TEST_CASE("engram token texts: BPE bytes, GPT-2 spellings, added tokens, unused ids empty", "[convert][v41]") {
  auto hf = convert_hf_tokenizer(tokenizer_json().dump(), "tokenizer.json");
  REQUIRE(hf);
  auto t = engram_token_texts(*hf);
  REQUIRE(t);
  REQUIRE(t->size() == 302);
  CHECK((*t)[3 + 'A'].text == "A");
  CHECK((*t)[3 + ' '].text == " ");
  CHECK((*t)[3 + ' '].spelling == "\xC4\xA0");  // Ġ
  CHECK((*t)[3 + 0xE8].text == "\xE8");          // a lone UTF-8 lead byte: keyed by its spelling
  CHECK((*t)[3 + 0xE8].spelling == "\xC3\xA8");  // è
  CHECK((*t)[261].text == "hell");
  CHECK((*t)[0].text == kBos);  // ｜ and ▁ are outside GPT-2's map: the content's own UTF-8
  CHECK((*t)[300].spelling == kUser);
  CHECK((*t)[280].text.empty());
  CHECK((*t)[280].spelling.empty());
}

TEST_CASE("a DeepSeek-V4.1 checkpoint in the release's names converts, and the container holds what it should",
          "[convert][e2e][v41]") {
  test::TempDir dir("conv-v41");
  write_v41_checkpoint(dir.path() / "src");
  auto ck = Checkpoint::open(dir.path() / "src");
  REQUIRE(ck);
  for (int bits : {8, 4}) {
    INFO("--engram-bits " << bits);
    const fs::path out = dir.path() / ("out" + std::to_string(bits) + ".waste");
    auto s = convert_checkpoint(options(dir.path() / "src", out, bits));
    INFO((s ? std::string() : s.error().message));
    REQUIRE(s);
    CHECK(s->complete);
    CHECK(s->layers.size() == 4);
    CHECK(s->note.find("left out 3 tensors of the DSpark draft stages (mtp.*, num_nextn_predict_layers 1): the "
                       "container has no reader for them") != std::string::npos);
    CHECK(s->note.find("left out 3 tensors of the vision tower (vision.*, aligner.*, image_*): the text container "
                       "does not carry it") != std::string::npos);
    CHECK(s->note.find("Engram tables of layers [1,2] written as engram-L{n}.bin at " + std::to_string(bits) +
                       " bits") != std::string::npos);

    std::set<std::string> files;
    for (const auto& e : fs::directory_iterator(out)) files.insert(e.path().filename().string());
    for (const char* f : {"manifest.json", "trunk.bin", "codebooks.bin", "experts-L0.bin", "experts-L3.bin",
                          "engram-L1.bin", "engram-L2.bin", "engram.json", "engram-tokmap.bin", "tokenizer.model",
                          "specials.json"}) {
      CHECK(files.count(f) == 1);
    }
    CHECK(files.count(".convert") == 0);

    // The manifest's config: the V4.1 keys, as ModelConfig reads them back.
    auto m = Manifest::parse(test::read_file(out / "manifest.json"));
    REQUIRE(m);
    const ModelConfig& c = m->config;
    CHECK(c.arch == "deepseek-v4.1");
    CHECK(m->tensor_prefix.empty());
    CHECK(c.n_csa_layers() == 4);
    CHECK(c.n_experts == 4);
    CHECK(c.top_k == 2);
    CHECK(c.renormalize);
    CHECK(c.scoring == RouterScoring::sqrtsoftplus);
    CHECK(c.compress_ratios == std::vector<int>{0, 2, 2, 1});
    CHECK(c.kv_source_layer_ids == std::vector<int>{1, 3});
    CHECK(c.index_source_layer_ids == std::vector<int>{1, 3});
    CHECK(c.candidate_source_layer_id == 3);
    CHECK(c.head_dim == 32);
    CHECK(c.o_groups == 2);
    CHECK(c.o_lora_rank == 16);
    CHECK(c.sliding_window == 8);
    CHECK(c.compress_rope_theta == 160000.0);
    CHECK(c.attn_sink);
    CHECK(c.hc_single_pass);
    CHECK(c.hc_mult == 2);
    CHECK(c.engram_layer_ids == std::vector<int>{1, 2});
    CHECK(c.engram_num_embeddings == std::vector<std::int64_t>{240, 306});
    CHECK(c.eos_token_id == 1);
    CHECK(m->config_json["tokenizer_pattern"] == 1);

    // Trunk: the container names, no companion, draft, vision or table tensor; small tensors F32
    // and equal to the decoded source.
    std::set<std::string> names;
    for (const auto& t : m->trunk) names.insert(t.name);
    for (const auto& n : names) {
      INFO(n);
      CHECK(n.find(".scale") == std::string::npos);
      CHECK(n.find("mtp") == std::string::npos);
      CHECK(n.find("vision") == std::string::npos);
      CHECK(n.find("engram.embed") == std::string::npos);
      CHECK(n.find("experts.") != 0);
    }
    for (const char* n : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight", "model.hc_head_fn",
                          "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
                          "model.layers.2.self_attn.wo_a.weight", "model.layers.1.self_attn.compressor.wgate.weight",
                          "model.layers.3.self_attn.indexer.weights_proj.weight",
                          "model.layers.0.block_sparse_moe.gate.e_score_correction_bias",
                          "model.layers.0.block_sparse_moe.gate.bias_vl",
                          "model.layers.3.block_sparse_moe.shared_experts.down_proj.weight",
                          "model.layers.1.engram.wkv.weight", "model.layers.2.engram.q_weight",
                          "model.layers.1.hc_attn_fn", "model.layers.1.hc_ffn_scale"}) {
      CHECK(names.count(n) == 1);
    }
    CHECK(names.size() == 6 + 4 * 22 + 7 + 6 + 2 * 3);
    CHECK(m->find_tensor("model.layers.2.self_attn.wo_a.weight")->shape == std::vector<std::int64_t>{32, 64});
    CHECK(m->find_tensor("model.layers.1.engram.wkv.weight")->shape == std::vector<std::int64_t>{192, 128});
    auto trunk = Trunk::load(out, *m);
    REQUIRE(trunk);
    for (const auto& [cname, hname] : std::vector<std::pair<std::string, std::string>>{
             {"model.layers.2.self_attn.wq_b.weight", "layers.2.attn.wq_b.weight"},
             {"model.layers.0.self_attn.attn_sink", "layers.0.attn.attn_sink"},
             {"model.layers.3.block_sparse_moe.shared_experts.up_proj.weight", "layers.3.ffn.shared_experts.w3.weight"},
             {"model.layers.1.block_sparse_moe.gate.e_score_correction_bias", "layers.1.ffn.gate.bias"}}) {
      INFO(cname);
      const auto* t = trunk->find(cname);
      REQUIRE(t != nullptr);
      CHECK(t->info->fmt == TensorFormat::f32);
      auto got = trunk->dequantize(*t);
      REQUIRE(got);
      CHECK(*got == decoded(*ck, hname, {32, 32}));
    }

    // Experts: one bank per MoE layer; records pass their header checks and CRC.
    auto info_geo = ExpertGeometry::from(c, m->quant);
    REQUIRE(info_geo);
    const std::string bank = test::read_file(out / "experts-L2.bin");
    REQUIRE(bank.size() == info_geo->record_bytes * kExperts);
    for (int e = 0; e < kExperts; ++e) {
      auto rec = std::as_bytes(std::span(bank.data() + e * info_geo->record_bytes, info_geo->record_bytes));
      CHECK(validate_record_header(rec, 2, e, m->quant, *info_geo, 4 * 3 * m->quant.stages).has_value());
      CHECK(verify_record_crc(rec, 2, e, *info_geo).has_value());
    }

    // Engram tables: header, CRC, and every row within the quantization bound of the source.
    for (int i = 0; i < 2; ++i) {
      const int layer = i + 1;
      auto rd = EngramTableReader::open(out / ("engram-L" + std::to_string(layer) + ".bin"));
      REQUIRE(rd);
      CHECK(rd->header().bits == bits);
      CHECK(rd->header().rows == std::uint64_t(kEngRows[i]));
      CHECK(rd->header().width == kEngDim);
      CHECK(rd->header().layer == layer);
      CHECK(fs::file_size(out / ("engram-L" + std::to_string(layer) + ".bin")) == rd->header().file_bytes());
      auto crc = rd->data_crc();
      REQUIRE(crc);
      CHECK(*crc == rd->header().data_crc);
      const auto src = decoded(*ck, "layers." + std::to_string(layer) + ".engram.embed.weight", {1, 32});
      const float qmax = bits == 8 ? 127.0f : 7.0f;
      std::vector<float> row(kEngDim);
      double worst = 0;
      for (std::int64_t r = 0; r < kEngRows[i]; ++r) {
        REQUIRE(rd->read_row(std::uint64_t(r), row));
        float amax = 0;
        for (int k = 0; k < kEngDim; ++k) amax = std::max(amax, std::fabs(src[std::size_t(r * kEngDim + k)]));
        for (int k = 0; k < kEngDim; ++k) {
          const double err = std::fabs(double(row[std::size_t(k)]) - src[std::size_t(r * kEngDim + k)]);
          worst = std::max(worst, err / (amax / qmax));
        }
      }
      INFO("layer " << layer << ": worst error " << worst << " scales");
      CHECK(worst <= 0.5 * (1 + 1.0 / 1024) + qmax / 1024);
      CHECK(worst > 0.0);  // quantized, not copied
    }

    // engram.json and engram-tokmap.bin: the layout of engram_layer_ids, primes summing to the rows.
    auto tables = engram::load_engram_tables(out);
    REQUIRE(tables);
    REQUIRE(tables->layout.layers.size() == 2);
    CHECK(tables->layout.layers[0].layer == 1);
    CHECK(tables->layout.layers[1].layer == 2);
    CHECK(tables->layout.layers[0].primes == std::vector<std::uint64_t>{53, 59, 61, 67});
    CHECK(tables->layout.layers[1].primes == std::vector<std::uint64_t>{71, 73, 79, 83});
    CHECK(tables->layout.layers[0].rows() == 240);
    CHECK(tables->layout.layers[1].rows() == 306);
    CHECK(tables->layout.compressed_vocab_size == c.engram_compressed_vocab_size);
    REQUIRE(tables->token_map.size() == std::size_t(kVocab));
    CHECK(tables->layout.pad_id == tables->token_map[2]);
    CHECK(tables->token_map[3 + 'A'] == tables->token_map[3 + 'a']);  // case folded
    CHECK(tables->token_map[3 + 'A'] != tables->token_map[3 + 'b']);
  }
}

TEST_CASE("a converted DeepSeek-V4.1 checkpoint runs in the engine, its Engram rows read from the written tables",
          "[convert][e2e][v41]") {
  test::TempDir dir("conv-v41-run");
  write_v41_checkpoint(dir.path() / "src");
  std::vector<int> prompt;
  for (int i = 0; i < 10; ++i) prompt.push_back((i * 41 + 7) % kVocab);
  std::vector<std::vector<float>> logits_of;
  for (int bits : {8, 4}) {
    INFO("--engram-bits " << bits);
    const fs::path out = dir.path() / ("out" + std::to_string(bits) + ".waste");
    auto s = convert_checkpoint(options(dir.path() / "src", out, bits));
    INFO((s ? std::string() : s.error().message));
    REQUIRE(s);
    EngineOptions o;
    o.model = out;
    o.threads = 1;
    o.ctx_tokens = 32;
    o.prefill_chunk = 4;
    o.lookahead = 0;
    auto engine = Engine::open(o);
    INFO((engine ? std::string() : engine.error().message));
    REQUIRE(engine);
    auto fed = (*engine)->eval(prompt);
    REQUIRE(fed);
    for (int step = 0; step < 3; ++step) {
      const int next[1] = {int(std::max_element(fed->begin(), fed->end()) - fed->begin())};
      fed = (*engine)->eval(next);
      REQUIRE(fed);
    }
    CHECK((*engine)->position() == 13);
    REQUIRE(fed->size() == std::size_t(kVocab));
    for (float v : *fed) REQUIRE(std::isfinite(v));
    // Two Engram layers of 2- and 3-grams x 2 heads: 8 rows per token, every fed token's.
    const auto rows = (*engine)->engram_stats();
    REQUIRE(rows);
    CHECK(rows->rows_asked == 13 * 8);
    logits_of.emplace_back(fed->begin(), fed->end());
  }
  // Only the Engram tables' width differs between the two containers: the logits move, a little.
  float diff = 0;
  for (std::size_t i = 0; i < logits_of[0].size(); ++i) diff = std::max(diff, std::fabs(logits_of[0][i] - logits_of[1][i]));
  INFO("8- vs 4-bit Engram tables: max logit difference " << diff);
  CHECK(diff > 0.0f);
}

TEST_CASE("V4.1 conversion refuses a missing sink, an unknown name and a wrong Engram size by name",
          "[convert][v41]") {
  test::TempDir dir("conv-v41-bad");
  const fs::path src = dir.path() / "src";
  write_v41_checkpoint(src);
  // Wrong engram_compressed_vocab_size: the tokenizer's map disagrees.
  json config = json::parse(test::read_file(src / "config.json"));
  const auto n = config["text_config"]["engram_compressed_vocab_size"].get<std::int64_t>();
  config["text_config"]["engram_compressed_vocab_size"] = n - 1;
  test::write_file(src / "config.json", config.dump());
  auto a = convert_checkpoint(options(src, dir.path() / "a.waste", 8));
  REQUIRE_FALSE(a);
  CHECK(a.error().message == "config.json: engram_compressed_vocab_size " + std::to_string(n - 1) +
                                 ", but the tokenizer's compressed token map has " + std::to_string(n) +
                                 " ids (another tokenizer, or another normalizer)");
  // Rows that are not the primes' sum.
  config["text_config"]["engram_compressed_vocab_size"] = n;
  config["text_config"]["engram_num_embeddings"] = {240, 300};
  test::write_file(src / "config.json", config.dump());
  auto b = convert_checkpoint(options(src, dir.path() / "b.waste", 8));
  REQUIRE_FALSE(b);
  CHECK(b.error().message == "config.json: engram layout: engram layer 2: the bucket primes sum to 306 rows and "
                             "engram_num_embeddings states 300");
  config["text_config"]["engram_num_embeddings"] = {240, 306};
  test::write_file(src / "config.json", config.dump());

  // An unknown release name is refused, not dropped.
  {
    write_v41_checkpoint(dir.path() / "odd");
    auto index = json::parse(test::read_file(dir.path() / "odd" / "model.safetensors.index.json"));
    // attn.* names pass through (the forward pass picks what it reads); an ffn name it does not map is refused.
    index["weight_map"]["layers.0.attn.mystery.weight"] = "model-00003-of-00003.safetensors";
    index["weight_map"]["layers.0.ffn.mystery.weight"] = "model-00003-of-00003.safetensors";
    std::vector<test::StTensor> extra;
    add_bf16(extra, "layers.0.attn.mystery.weight", {4, 4});
    add_bf16(extra, "layers.0.ffn.mystery.weight", {4, 4});
    test::write_file(dir.path() / "odd" / "model-00003-of-00003.safetensors", test::safetensors_bytes(extra));
    test::write_file(dir.path() / "odd" / "model.safetensors.index.json", index.dump());
    auto d = convert_checkpoint(options(dir.path() / "odd", dir.path() / "d.waste", 8));
    REQUIRE_FALSE(d);
    CHECK(d.error().message == "tensor layers.0.ffn.mystery.weight: not a DeepSeek-V4.1 release name this converter "
                               "knows (refused rather than left out)");
  }
  // A checkpoint without layer 2's sink.
  {
    write_v41_checkpoint(dir.path() / "nosink", {"layers.2.attn.attn_sink"});
    auto c = convert_checkpoint(options(dir.path() / "nosink", dir.path() / "c.waste", 8));
    REQUIRE_FALSE(c);
    CHECK(c.error().message == "checkpoint: tensor model.layers.2.self_attn.attn_sink: missing");
    CHECK_FALSE(fs::exists(dir.path() / "c.waste" / "manifest.json"));
  }
}

TEST_CASE("an interrupted Engram table resumes from its progress file to the same bytes", "[convert][v41][engram]") {
  test::TempDir dir("conv-v41-resume");
  std::vector<test::StTensor> t;
  add_fp8(t, "layers.1.engram.embed", 500, 64, 1);
  test::write_file(dir.path() / "model.safetensors", test::safetensors_bytes(t));
  auto ck = Checkpoint::open(dir.path());
  REQUIRE(ck);
  auto w = resolve_weight(*ck, "layers.1.engram.embed.weight", {1, 32});
  REQUIRE(w);
  EngramTableHeader h;
  h.bits = 8;
  h.width = 64;
  h.rows = 500;
  h.layer = 1;
  const std::uint64_t rpp = h.rows_per_page();  // 60
  REQUIRE(rpp == 60);
  REQUIRE(convert_engram_table(*w, h, dir.path() / "whole.bin", dir.path() / "whole.progress", rpp,
                               ProgressMode::quiet));
  // "Crash" after 2 chunks: the file holds 2 pages and a few rows of the 3rd, the progress 2 pages.
  {
    auto wr = EngramTableWriter::open(dir.path() / "part.bin", h, 0, 0);
    REQUIRE(wr);
    std::vector<float> rows(std::size_t(130 * 64));
    REQUIRE(decode_rows(*w, 0, 130, rows));
    for (int r = 0; r < 130; ++r) REQUIRE(wr->append(std::span(rows).subspan(std::size_t(r) * 64, 64)));
    REQUIRE(wr->sync());
    test::write_file(dir.path() / "part.progress", json{{"rows", 120}, {"crc", wr->crc()}}.dump());
  }
  REQUIRE(convert_engram_table(*w, h, dir.path() / "part.bin", dir.path() / "part.progress", 2 * rpp,
                               ProgressMode::quiet));
  CHECK(test::read_file(dir.path() / "part.bin") == test::read_file(dir.path() / "whole.bin"));
  auto bad = convert_engram_table(*w, h, dir.path() / "x.bin", dir.path() / "x.progress", rpp + 1, ProgressMode::quiet);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "engram chunk of 61 rows is not a multiple of 60");
}
