// A stack of CSA2 attention layers on given weights, for the PyTorch oracle
// (tests/reference/csa2_oracle.py):
//   waste-dump-csa2 INPUT CHUNK OUT_DIR
// INPUT holds 16 int32 (hidden, heads, head_dim, rope_dim, q_lora, o_groups, o_lora, window,
// index_heads, index_head_dim, index_topk, candidate_topk_blocks, candidate_block_size, tokens,
// layers, 0), then per layer 5 int32 (compress ratio, kv source, index source, candidate source,
// uses candidates), then 7 float32 (rms eps, rope_theta, compress_rope_theta, YaRN factor,
// original max position, beta_fast, beta_slow), then per layer float32 arrays, row-major, in this
// order: x [tokens][hidden] (the layer's own input), wq_a [q_lora][hidden], q_norm [q_lora],
// wq_b [heads*head_dim][q_lora], wkv [head_dim][hidden], kv_norm [head_dim],
// wo_a [o_groups*o_lora][heads*head_dim/o_groups], wo_b [hidden][o_groups*o_lora], attn_sink
// [heads]; a KV source adds compressor wkv [head_dim][hidden], wgate [head_dim][hidden] (ratio > 1
// only), norm [head_dim]; an index source adds indexer wq_b [ih*id][q_lora], weights_proj
// [ih][hidden], and on a KV source wk [id][head_dim], k_norm [id].
// Runs the tokens through the layers in calls of CHUNK tokens (1 = decode), the layers in order
// inside a call sharing one Csa2Selection, each layer reading the latest KV source at or before
// it, and writes OUT_DIR/out.f32 ([layers][tokens][hidden]), OUT_DIR/selected.i32 (per index
// source in layer order, per token: count, then the selected groups) and OUT_DIR/candidates.i32
// (the same for the candidate source's kept blocks).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "compute/forward/csa2.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "tests/compute/tools/float_reader.hpp"

using namespace waste;

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "waste-dump-csa2: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return fail("usage: waste-dump-csa2 INPUT CHUNK OUT_DIR");
  const std::filesystem::path out_dir = argv[3];
  const int chunk = std::stoi(argv[2]);
  std::ifstream in(argv[1], std::ios::binary);
  std::int32_t h[16];
  if (!in.read(reinterpret_cast<char*>(h), sizeof(h))) return fail("cannot read the header of " + std::string(argv[1]));
  forward::Csa2Shape shape;
  shape.hidden = h[0], shape.heads = h[1], shape.head_dim = h[2], shape.rope_dim = h[3], shape.q_lora = h[4];
  shape.o_groups = h[5], shape.o_lora = h[6], shape.window = h[7], shape.index_heads = h[8];
  shape.index_head_dim = h[9], shape.index_topk = h[10], shape.candidate_blocks = h[11];
  shape.candidate_block_size = h[12];
  const int tokens = h[13], layers = h[14];
  if (chunk < 1 || tokens < 1 || layers < 1) return fail("CHUNK, the token and the layer count must be positive");
  std::vector<forward::Csa2Role> roles(static_cast<std::size_t>(layers));
  for (auto& role : roles) {
    std::int32_t r[5];
    if (!in.read(reinterpret_cast<char*>(r), sizeof(r))) return fail("cannot read the layer roles");
    role = {r[0], r[1] != 0, r[2] != 0, r[3] != 0, r[4] != 0};
  }
  float rp[7];
  if (!in.read(reinterpret_cast<char*>(rp), sizeof(rp))) return fail("cannot read the rotary parameters");
  shape.eps = rp[0];
  shape.main_rope = RopeConfig{.enabled = true, .theta = rp[1]};
  shape.compress_rope = RopeConfig{.enabled = true, .theta = rp[2], .yarn = rp[3] > 1.0f, .factor = rp[3],
                                   .original_max_pos = int(rp[4]), .beta_fast = rp[5], .beta_slow = rp[6]};
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % sizeof(float) != 0) return fail("the input's float arrays are not whole floats");
  std::vector<float> floats(bytes.size() / sizeof(float));
  std::memcpy(floats.data(), bytes.data(), bytes.size());

  const std::int64_t hid = shape.hidden, D = shape.head_dim, HD = std::int64_t(shape.heads) * D;
  const std::int64_t GL = std::int64_t(shape.o_groups) * shape.o_lora, ID = shape.index_head_dim;
  test::FloatReader r{floats};
  std::vector<const float*> xs(static_cast<std::size_t>(layers));
  std::vector<forward::Csa2Weights> weights(static_cast<std::size_t>(layers));
  for (int L = 0; L < layers; ++L) {
    const forward::Csa2Role& role = roles[std::size_t(L)];
    forward::Csa2Weights& w = weights[std::size_t(L)];
    xs[std::size_t(L)] = r.take(std::int64_t(tokens) * hid);
    w.wq_a = r.matrix(shape.q_lora, hid);
    w.q_norm = r.vec(shape.q_lora);
    w.wq_b = r.matrix(HD, shape.q_lora);
    w.wkv = r.matrix(D, hid);
    w.kv_norm = r.vec(D);
    w.wo_a = r.matrix(GL, HD / std::max(shape.o_groups, 1));
    w.wo_b = r.matrix(hid, GL);
    w.attn_sink = r.vec(shape.heads);
    if (role.kv_source) {
      w.c_wkv = r.matrix(D, hid);
      if (role.ratio > 1) w.c_wgate = r.matrix(D, hid);
      w.c_norm = r.vec(D);
    }
    if (role.index_source) {
      w.i_wq_b = r.matrix(std::int64_t(shape.index_heads) * ID, shape.q_lora);
      w.i_weights_proj = r.matrix(shape.index_heads, hid);
      if (role.kv_source) {
        w.i_wk = r.matrix(ID, D);
        w.i_k_norm = r.vec(ID);
      }
    }
  }
  if (!r.ok || r.at != floats.size()) return fail("the input's size does not match its header");

  std::vector<forward::Csa2Block> blocks;
  std::vector<forward::Csa2Window> windows;
  std::vector<forward::Csa2Source> sources(static_cast<std::size_t>(layers));
  for (int L = 0; L < layers; ++L) {
    const forward::Csa2Role& role = roles[std::size_t(L)];
    auto block = forward::Csa2Block::bind(shape, role, weights[std::size_t(L)]);
    if (!block) return fail("layer " + std::to_string(L) + ": " + block.error().message);
    blocks.push_back(*block);
    auto window = forward::Csa2Window::create(shape);
    if (!window) return fail(window.error().message);
    windows.push_back(std::move(*window));
    if (role.kv_source) {
      auto source = forward::Csa2Source::create(shape, role.ratio, role.index_source, tokens);
      if (!source) return fail(source.error().message);
      sources[std::size_t(L)] = std::move(*source);
    }
  }
  forward::Csa2Scratch scratch;
  scratch.resize(shape, tokens, chunk);
  forward::Csa2Selection sel;
  sel.resize(shape, chunk);
  std::vector<float> out(std::size_t(layers) * std::size_t(tokens) * std::size_t(hid), 0.0f);
  std::vector<std::vector<std::int32_t>> selected(static_cast<std::size_t>(layers));
  std::vector<std::vector<std::int32_t>> candidates(static_cast<std::size_t>(layers));

  ThreadPool pool(2);
  forward::Exec exec{pool, kernels::active()};
  for (int pos0 = 0; pos0 < tokens; pos0 += chunk) {
    const int n = std::min(chunk, tokens - pos0);
    sel.reset();
    forward::Csa2Source* source = nullptr;
    for (int L = 0; L < layers; ++L) {
      const forward::Csa2Role& role = roles[std::size_t(L)];
      if (role.kv_source) source = &sources[std::size_t(L)];
      float* o = out.data() + (std::int64_t(L) * tokens + pos0) * hid;
      auto st = blocks[std::size_t(L)].forward(exec, xs[std::size_t(L)] + std::int64_t(pos0) * hid, n, pos0,
                                               windows[std::size_t(L)], role.ratio > 0 ? source : nullptr, sel,
                                               scratch, o);
      if (!st) return fail("layer " + std::to_string(L) + ": " + st.error().message);
      for (int t = 0; t < n && role.index_source; ++t) {
        auto& dst = selected[std::size_t(L)];
        const int count = sel.count[std::size_t(t)];
        const int* g = sel.groups.data() + std::int64_t(t) * sel.topk;
        dst.push_back(count);
        dst.insert(dst.end(), g, g + count);
        if (!role.candidate_source) continue;
        auto& cdst = candidates[std::size_t(L)];
        const int bc = sel.block_count[std::size_t(t)];
        const int* b = sel.blocks.data() + std::int64_t(t) * sel.max_blocks;
        cdst.push_back(bc);
        cdst.insert(cdst.end(), b, b + bc);
      }
    }
  }
  std::filesystem::create_directories(out_dir);
  std::ofstream oo(out_dir / "out.f32", std::ios::binary);
  oo.write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size() * sizeof(float)));
  std::ofstream so(out_dir / "selected.i32", std::ios::binary);
  std::ofstream co(out_dir / "candidates.i32", std::ios::binary);
  for (int L = 0; L < layers; ++L) {
    const auto& s = selected[std::size_t(L)];
    so.write(reinterpret_cast<const char*>(s.data()), std::streamsize(s.size() * sizeof(std::int32_t)));
    const auto& c = candidates[std::size_t(L)];
    co.write(reinterpret_cast<const char*>(c.data()), std::streamsize(c.size() * sizeof(std::int32_t)));
  }
  if (!oo || !so || !co) return fail("cannot write to " + out_dir.string());
  return 0;
}
