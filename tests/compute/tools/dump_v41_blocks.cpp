// DeepSeek-V4.1's standalone blocks on given inputs, for the float64 oracle
// (tests/reference/v41_blocks_oracle.py):
//   waste-dump-v41blocks router|mhc|engram INPUT OUT_DIR
//   waste-dump-v41blocks dequant f8_e8m0|q8|q4 WIDTH INPUT OUT_DIR
// INPUT (router, mhc, engram) holds 8 int32 and 4 float32 parameters, then float32 arrays,
// row-major, in the order below. Outputs are little-endian files in OUT_DIR.
//   router: ints (experts, top_k, tokens, score function 0 sigmoid / 1 softmax / 2 sqrtsoftplus,
//           renormalize, has bias, has bias_vl, 0), floats (gate_temp, route_scale, 0, 0);
//           logits [tokens][experts], bias [experts] (if has bias), bias_vl [experts] (if has
//           bias_vl), image [tokens] (0 or 1). -> ids.i32, weights.f32 [tokens][top_k].
//   mhc:    ints (hc, hidden, layers, sinkhorn iters, tokens, 0, 0, 0), floats (rms_eps, hc_eps,
//           0, 0); embeddings [tokens][hidden]; per layer, per site (attention, FFN): fn
//           [(2+hc)*hc][hc*hidden], base [(2+hc)*hc], scale [3], the stand-in sublayer W
//           [hidden][hidden] (y = tanh(W x)). Runs single-pass mHC: layer 0's attention reads
//           stream 0, each site the previous site's pre, the head the last FFN's.
//           -> head.f32 [tokens][hidden], streams.f32 [tokens][hc][hidden].
//   engram: ints (hc, hidden, rows, row_dim, tokens, 0, 0, 0), floats (eps, 0, 0, 0); wkv
//           [(hc+1)*hidden][rows*row_dim], q_weight [hc][hidden], k_weight [hc][hidden], rows
//           [tokens][rows*row_dim], streams [tokens][hc][hidden], live [tokens] (0 or 1).
//           -> streams.f32 [tokens][hc][hidden], gates.f32 [tokens][hc].
//   dequant: INPUT is whole rows of the format's bytes -> values.f32 [rows][WIDTH].
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "compute/engram/engram_gate.hpp"
#include "compute/engram/engram_row.hpp"
#include "compute/forward/mhc.hpp"
#include "compute/forward/router.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "tests/compute/tools/float_reader.hpp"

using namespace waste;

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "waste-dump-v41blocks: %s\n", msg.c_str());
  return 1;
}

std::vector<char> read_all(const std::string& path, bool& ok) {
  std::ifstream in(path, std::ios::binary);
  ok = bool(in);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

template <class T>
bool write(const std::filesystem::path& path, const std::vector<T>& v) {
  std::ofstream o(path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
  return bool(o);
}

// The parameter header and the float arrays after it, taken in order.
struct Input {
  std::int32_t i[8] = {};
  float f[4] = {};
  std::vector<float> data;
  test::FloatReader r{data};  // the arrays after the header, in order
};

bool parse(const std::string& path, Input& in) {
  bool ok = false;
  const std::vector<char> bytes = read_all(path, ok);
  constexpr std::size_t head = sizeof(in.i) + sizeof(in.f);
  if (!ok || bytes.size() < head || (bytes.size() - head) % sizeof(float) != 0) return false;
  std::memcpy(in.i, bytes.data(), sizeof(in.i));
  std::memcpy(in.f, bytes.data() + sizeof(in.i), sizeof(in.f));
  in.data.resize((bytes.size() - head) / sizeof(float));
  std::memcpy(in.data.data(), bytes.data() + head, bytes.size() - head);
  return true;
}

int run_router(Input& in, const std::filesystem::path& out) {
  forward::NoauxRouter r;
  r.n_experts = in.i[0];
  r.top_k = in.i[1];
  const int tokens = in.i[2];
  if (in.i[3] < 0 || in.i[3] > 2) return fail("score function code " + std::to_string(in.i[3]));
  r.score = RouterScoring(in.i[3]);
  r.renormalize = in.i[4] != 0;
  r.gate_temp = in.f[0];
  r.route_scale = in.f[1];
  if (r.n_experts < 1 || r.top_k < 1 || r.top_k > r.n_experts || tokens < 1) return fail("bad router shape");
  const float* logits = in.r.take(std::int64_t(tokens) * r.n_experts);
  const std::vector<float> bias = in.i[5] ? in.r.vec(r.n_experts) : std::vector<float>();
  const std::vector<float> bias_vl = in.i[6] ? in.r.vec(r.n_experts) : std::vector<float>();
  const float* image = in.r.take(tokens);
  if (!in.r.whole()) return fail("the input's size does not match its header");
  std::vector<float> probs(std::size_t(r.n_experts)), scored(std::size_t(r.n_experts));
  std::vector<unsigned char> taken(std::size_t(r.n_experts));
  std::vector<std::int32_t> ids(std::size_t(tokens) * std::size_t(r.top_k));
  std::vector<float> weights(ids.size());
  const forward::NoauxScratch s{probs.data(), scored.data(), taken.data()};
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> id(std::size_t(r.top_k));
    forward::route_noaux(r, logits + std::int64_t(t) * r.n_experts, bias, bias_vl, image[t] != 0.0f, s, id.data(),
                         weights.data() + std::int64_t(t) * r.top_k);
    for (int j = 0; j < r.top_k; ++j) ids[std::size_t(t) * std::size_t(r.top_k) + std::size_t(j)] = id[std::size_t(j)];
  }
  if (!write(out / "ids.i32", ids) || !write(out / "weights.f32", weights)) return fail("cannot write " + out.string());
  return 0;
}

int run_mhc(Input& in, const std::filesystem::path& out, const forward::Exec& exec) {
  ModelConfig c;
  c.hc_mult = in.i[0];
  c.hidden = in.i[1];
  const int layers = in.i[2];
  c.hc_sinkhorn_iters = in.i[3];
  const int tokens = in.i[4];
  c.rms_eps = in.f[0];
  c.hc_eps = in.f[1];
  const int hc = c.hc_mult, hid = c.hidden, mix_rows = c.hc_mix(), width = c.stream_width();
  if (hc < 1 || hc > 16 || hid < 1 || layers < 1 || tokens < 1 || c.hc_sinkhorn_iters < 1) return fail("bad mhc shape");
  const float* emb = in.r.take(std::int64_t(tokens) * hid);
  struct Site {
    model::MhcWeights hc;
    kernels::QuantMatrix sub;
  };
  std::vector<Site> sites(std::size_t(2 * layers));
  for (auto& s : sites) {
    s.hc.fn = in.r.matrix(mix_rows, width);
    s.hc.base = in.r.vec(mix_rows);
    s.hc.scale = in.r.vec(3);
    s.sub = in.r.matrix(hid, hid);
  }
  if (!in.r.whole()) return fail("the input's size does not match its header");
  std::vector<float> head(std::size_t(tokens) * std::size_t(hid));
  std::vector<float> streams_out(std::size_t(tokens) * std::size_t(width));
  std::vector<float> flat(static_cast<std::size_t>(width)), mix(static_cast<std::size_t>(mix_rows));
  std::vector<float> xin(static_cast<std::size_t>(hid)), y(static_cast<std::size_t>(hid));
  float pre[16], post[16], comb[256];
  for (int t = 0; t < tokens; ++t) {
    float* x = streams_out.data() + std::int64_t(t) * width;
    for (int k = 0; k < hc; ++k) {
      std::memcpy(x + std::int64_t(k) * hid, emb + std::int64_t(t) * hid, std::size_t(hid) * sizeof(float));
    }
    forward::mhc_first_pre(hc, pre);
    for (const Site& s : sites) {
      forward::mhc_single_pass_site(exec, c, s.hc, x, pre, flat.data(), mix.data(), xin.data(), pre, post, comb);
      forward::matvec(exec, s.sub, xin.data(), y.data());
      for (float& v : y) v = std::tanh(v);
      forward::mhc_expand(post, comb, y.data(), x, hc, hid);
    }
    forward::mhc_collapse(pre, x, hc, hid, head.data() + std::int64_t(t) * hid);
  }
  if (!write(out / "head.f32", head) || !write(out / "streams.f32", streams_out)) {
    return fail("cannot write " + out.string());
  }
  return 0;
}

int run_engram(Input& in, const std::filesystem::path& out, const forward::Exec& exec) {
  auto shape = engram::EngramGateShape::make(in.i[0], in.i[1], in.i[2], in.i[3], in.f[0]);
  if (!shape) return fail(shape.error().message);
  const int tokens = in.i[4];
  if (tokens < 1) return fail("bad token count");
  const std::int64_t sw = std::int64_t(shape->hc) * shape->hidden;
  const kernels::QuantMatrix wkv = in.r.matrix(shape->out_dim(), shape->in_dim());
  const std::vector<float> q = in.r.vec(sw), k = in.r.vec(sw);
  const float* rows = in.r.take(std::int64_t(tokens) * shape->in_dim());
  const float* streams_in = in.r.take(std::int64_t(tokens) * sw);
  const float* live = in.r.take(tokens);
  if (!in.r.whole()) return fail("the input's size does not match its header");
  auto w = engram::EngramGateWeights::bind(*shape, wkv, q, k);
  if (!w) return fail(w.error().message);
  engram::EngramGateScratch s;
  s.resize(*shape);
  std::vector<float> streams(streams_in, streams_in + std::int64_t(tokens) * sw);
  std::vector<float> gates(std::size_t(tokens) * std::size_t(shape->hc));
  for (int t = 0; t < tokens; ++t) {
    engram::engram_gate_apply(exec, *shape, *w, rows + std::int64_t(t) * shape->in_dim(), live[t] != 0.0f,
                              streams.data() + std::int64_t(t) * sw, s, gates.data() + std::int64_t(t) * shape->hc);
  }
  if (!write(out / "streams.f32", streams) || !write(out / "gates.f32", gates)) {
    return fail("cannot write " + out.string());
  }
  return 0;
}

int run_dequant(const std::string& format, int width, const std::string& input, const std::filesystem::path& out) {
  engram::EngramRowFormat f;
  if (format == "f8_e8m0") f = engram::EngramRowFormat::f8_e8m0;
  else if (format == "q8") f = engram::EngramRowFormat::q8;
  else if (format == "q4") f = engram::EngramRowFormat::q4;
  else return fail("unknown row format " + format);
  auto row_bytes = engram::engram_row_bytes(f, width);
  if (!row_bytes) return fail(row_bytes.error().message);
  bool ok = false;
  const std::vector<char> bytes = read_all(input, ok);
  if (!ok || bytes.size() % std::size_t(*row_bytes) != 0) return fail("the input is not whole rows");
  const std::size_t n = bytes.size() / std::size_t(*row_bytes);
  std::vector<float> values(n * std::size_t(width));
  for (std::size_t r = 0; r < n; ++r) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data()) + r * std::size_t(*row_bytes);
    const std::span<float> row_out(values.data() + r * std::size_t(width), std::size_t(width));
    auto st = engram::engram_dequantize_row(f, std::span<const std::uint8_t>(p, std::size_t(*row_bytes)), row_out);
    if (!st) return fail(st.error().message);
  }
  if (!write(out / "values.f32", values)) return fail("cannot write " + out.string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "dequant") {
    if (argc != 6) return fail("usage: waste-dump-v41blocks dequant f8_e8m0|q8|q4 WIDTH INPUT OUT_DIR");
    std::filesystem::create_directories(argv[5]);
    return run_dequant(argv[2], std::stoi(argv[3]), argv[4], argv[5]);
  }
  if (argc != 4 || (mode != "router" && mode != "mhc" && mode != "engram")) {
    return fail("usage: waste-dump-v41blocks router|mhc|engram INPUT OUT_DIR");
  }
  Input in;
  if (!parse(argv[2], in)) return fail(std::string("cannot read ") + argv[2]);
  const std::filesystem::path out = argv[3];
  std::filesystem::create_directories(out);
  ThreadPool pool(2);
  const forward::Exec exec{pool, kernels::active()};
  if (mode == "router") return run_router(in, out);
  if (mode == "mhc") return run_mhc(in, out, exec);
  return run_engram(in, out, exec);
}
