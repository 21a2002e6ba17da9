// The k-pool indexer + sparse MLA on given weights, for the PyTorch oracle
// (tests/reference/indexer_oracle.py):
//   waste-dump-indexer INPUT CHUNK OUT_DIR
// INPUT holds 13 int32 (hidden, q_lora, kv_lora, heads, qk_nope, qk_rope, v_head, index_n_heads,
// index_head_dim, index_kpool, index_topk, tokens, 0) then float32 arrays, row-major, in this
// order: x [tokens][hidden]; MLA q_a_proj [q_lora][hidden], q_a_layernorm [q_lora], q_b_proj
// [heads*(nope+rope)][q_lora], kv_a_proj_with_mqa [kv_lora+rope][hidden], kv_a_layernorm [kv_lora],
// kv_b_proj [heads*(nope+v)][kv_lora], o_proj [hidden][heads*v]; indexer wq_b
// [ih*id][q_lora], wk [id][hidden], k_norm weight [id], bias [id], weights_proj [ih][hidden],
// index_kpool_compress_gate [id][hidden], index_kpool_compress_ape [kpool][id].
// Runs the tokens through mla_forward_kpool in calls of CHUNK tokens (1 = decode) and writes
// OUT_DIR/selected.i32 (per token: count, then the positions) and OUT_DIR/out.f32 ([tokens][hidden]).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/forward/kpool_indexer.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "tests/compute/tools/float_reader.hpp"
#include "shared/container/model_config.hpp"

using namespace waste;

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "waste-dump-indexer: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return fail("usage: waste-dump-indexer INPUT CHUNK OUT_DIR");
  const std::filesystem::path out_dir = argv[3];
  const int chunk = std::stoi(argv[2]);
  std::ifstream in(argv[1], std::ios::binary);
  std::int32_t h[13];
  if (!in.read(reinterpret_cast<char*>(h), sizeof(h))) return fail("cannot read the header of " + std::string(argv[1]));
  const int hidden = h[0], q_lora = h[1], kv_lora = h[2], heads = h[3], nope = h[4], rope = h[5], vd = h[6];
  const int ih = h[7], id = h[8], kpool = h[9], topk = h[10], tokens = h[11];
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % sizeof(float) != 0) return fail("the input's float arrays are not whole floats");
  std::vector<float> floats(bytes.size() / sizeof(float));
  std::memcpy(floats.data(), bytes.data(), bytes.size());
  if (chunk < 1 || tokens < 1) return fail("CHUNK and the token count must be positive");

  nlohmann::json j = {{"num_hidden_layers", 1},     {"hidden_size", hidden},    {"vocab_size", 16},
                      {"num_attention_heads", heads}, {"intermediate_size", 16}, {"kv_lora_rank", kv_lora},
                      {"q_lora_rank", q_lora},       {"qk_nope_head_dim", nope}, {"qk_rope_head_dim", rope},
                      {"v_head_dim", vd},            {"mla_use_nope", true},     {"rms_norm_eps", 1e-5}};
  auto config = ModelConfig::from_json(j);
  if (!config) return fail(config.error().message);
  const ModelConfig& c = *config;

  test::FloatReader r{floats};
  const float* x = r.take(std::int64_t(tokens) * hidden);
  model::MlaWeights mw;
  mw.q_a = r.matrix(q_lora, hidden);
  mw.q_a_norm = r.vec(q_lora);
  mw.q_b = r.matrix(std::int64_t(heads) * (nope + rope), q_lora);
  mw.kv_a = r.matrix(kv_lora + rope, hidden);
  mw.kv_a_norm = r.vec(kv_lora);
  mw.kv_b = r.matrix(std::int64_t(heads) * (nope + vd), kv_lora);
  mw.o_proj = r.matrix(hidden, std::int64_t(heads) * vd);
  forward::KpoolIndexerWeights iw;
  iw.wq_b = r.matrix(std::int64_t(ih) * id, q_lora);
  iw.wk = r.matrix(id, hidden);
  iw.k_norm_w = r.vec(id);
  iw.k_norm_b = r.vec(id);
  iw.weights_proj = r.matrix(ih, hidden);
  iw.compress_gate = r.matrix(id, hidden);
  iw.compress_ape = r.vec(std::int64_t(kpool) * id);
  if (!r.ok || r.at != floats.size()) return fail("the input's size does not match its header");

  auto shape = forward::KpoolIndexerShape::make(ih, id, kpool, topk, hidden, q_lora);
  if (!shape) return fail(shape.error().message);
  auto indexer = forward::KpoolIndexer::bind(*shape, iw);
  if (!indexer) return fail(indexer.error().message);
  auto state = forward::KpoolIndexerState::create(*shape, tokens);
  if (!state) return fail(state.error().message);
  forward::MlaScratch ms;
  ms.resize(c, tokens, chunk);
  forward::KpoolIndexerScratch is;
  is.resize(*shape, tokens, chunk);
  std::vector<float> cache(std::size_t(tokens) * std::size_t(kv_lora + rope), 0.0f);
  std::vector<float> out(std::size_t(tokens) * std::size_t(hidden), 0.0f);
  std::vector<std::int32_t> selected;

  ThreadPool pool(2);
  forward::Exec exec{pool, kernels::active()};
  for (int pos0 = 0; pos0 < tokens; pos0 += chunk) {
    const int n = std::min(chunk, tokens - pos0);
    auto st = forward::mla_forward_kpool(exec, c, mw, *indexer, x + std::int64_t(pos0) * hidden, n, pos0,
                                         cache.data(), ms, *state, is, out.data() + std::int64_t(pos0) * hidden);
    if (!st) return fail(st.error().message);
    for (int t = 0; t < n; ++t) {
      const int count = is.counts[std::size_t(t)];
      selected.push_back(count);
      const int* p = is.positions.data() + std::int64_t(t) * shape->max_selected();
      selected.insert(selected.end(), p, p + count);
    }
  }
  std::filesystem::create_directories(out_dir);
  std::ofstream so(out_dir / "selected.i32", std::ios::binary);
  so.write(reinterpret_cast<const char*>(selected.data()), std::streamsize(selected.size() * sizeof(std::int32_t)));
  std::ofstream oo(out_dir / "out.f32", std::ios::binary);
  oo.write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size() * sizeof(float)));
  if (!so || !oo) return fail("cannot write to " + out_dir.string());
  return 0;
}
