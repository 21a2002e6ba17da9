#include "cli/bench/floor.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string_view>

#include "compute/forward/lut_mode.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/model/decode_head.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "shared/container/expert_record.hpp"

namespace waste::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Best of `reps` timings of fn(): the floor is what the machine can do, not its average.
template <typename Fn>
double best_seconds(int reps, Fn&& fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// "model.layers.12.self_attn.q_proj.weight" -> 12; -1 when the name has no layer.
int layer_of(std::string_view name) {
  const auto at = name.find("layers.");
  if (at == std::string_view::npos) return -1;
  int layer = 0;
  bool any = false;
  for (std::size_t i = at + 7; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
    layer = layer * 10 + (name[i] - '0');
    any = true;
  }
  return any ? layer : -1;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Sum of 8-byte words: the loads are the point, the sum keeps them alive.
std::uint64_t sum_words(const std::uint64_t* p, std::size_t n) {
  std::uint64_t a[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) a[j] += p[i + std::size_t(j)];
  }
  for (; i < n; ++i) a[0] += p[i];
  return std::accumulate(a, a + 8, std::uint64_t(0));
}

double measure_stream_gbs(ThreadPool& pool) {
  constexpr std::size_t kBytes = std::size_t(256) << 20;  // far beyond any last-level cache here
  std::vector<std::uint64_t> buf(kBytes / 8);
  std::iota(buf.begin(), buf.end(), std::uint64_t(0));
  const std::int64_t parts = pool.size();
  std::vector<std::uint64_t> sinks(std::size_t(parts) * 8, 0);  // one cache line per part
  const double s = best_seconds(5, [&] {
    pool.parallel_for(parts, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t part = b; part < e; ++part) {
        const std::size_t lo = buf.size() * std::size_t(part) / std::size_t(parts);
        const std::size_t hi = buf.size() * std::size_t(part + 1) / std::size_t(parts);
        sinks[std::size_t(part) * 8] += sum_words(buf.data() + lo, hi - lo);
      }
    });
  });
  // The sum of 0..n-1 repeated 5 times: a check that the loads were not optimised away.
  const std::uint64_t n = buf.size();
  if (std::accumulate(sinks.begin(), sinks.end(), std::uint64_t(0)) != 5 * (n * (n - 1) / 2)) return 0.0;
  return double(kBytes) / s / 1e9;
}

// Fake experts at the container's geometry: random indices (valid for the stage tables), unit
// row scales. Enough of them that the index data does not fit in any cache, as in decode.
struct FakeExperts {
  std::vector<std::vector<std::uint8_t>> index[3];
  std::vector<std::uint16_t> scales[3];  // shared: fp16 1.0
  int count = 0;
};

FakeExperts make_experts(const ExpertGeometry& g, std::uint64_t target_bytes) {
  FakeExperts f;
  const std::uint64_t per = g.index_bytes[0] + g.index_bytes[1] + g.index_bytes[2];
  f.count = int(std::clamp<std::uint64_t>(per ? target_bytes / per : 1, 8, 512));
  std::mt19937 rng(12345);
  const unsigned mask = g.packed6 ? 0xFFu : unsigned(std::min(g.entries, 256) - 1);
  const bool pow2 = (g.entries & (g.entries - 1)) == 0;
  for (int k = 0; k < 3; ++k) {
    f.scales[k].assign(std::size_t(g.rows[k]), 0x3C00);
    f.index[k].resize(std::size_t(f.count));
    for (auto& idx : f.index[k]) {
      idx.resize(g.index_bytes[k]);
      for (auto& b : idx) {
        const unsigned r = unsigned(rng());
        b = std::uint8_t(g.packed6 || pow2 ? (r & mask) : r % unsigned(g.entries));
      }
    }
  }
  return f;
}

struct Luts {
  bool q16 = false;          // f32 holds int16 slots (rvq_lut_to_q16): the q16 LUT mode's tables
  std::vector<float> f32;
  std::vector<std::int8_t> q;
  std::vector<float> q_scales;
};

Luts random_lut(const ExpertGeometry& g, int n_vectors, const kernels::KernelTable& kt, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Luts l;
  l.f32.resize(std::size_t(n_vectors) * std::size_t(g.stages) * std::size_t(g.lut_entries));
  for (auto& v : l.f32) v = u(rng);
  if (g.packed6) {
    l.q.resize(l.f32.size());
    l.q_scales.resize(std::size_t(kernels::lut_quant_blocks(n_vectors)));
    kt.rvq_lut_quantize(l.f32.data(), n_vectors, g.stages, g.lut_entries, l.q.data(), l.q_scales.data());
  }
  l.q16 = forward::lut_q16(g);
  if (l.q16) kt.rvq_lut_to_q16(l.f32.data(), g.stages, g.lut_entries, 0, n_vectors);
  return l;
}

// Rows [r0, r1) of y = W x with the kernel the format needs.
void apply(const kernels::KernelTable& kt, const ExpertGeometry& g, const kernels::RvqMatrix& m, const Luts& lut,
           float* y, int r0, int r1) {
  if (g.packed6) {
    kt.rvq_apply_vq4p(m, lut.q.data(), lut.q_scales.data(), y, r0, r1);
  } else if (lut.q16) {
    kt.rvq_apply_q16(m, lut.f32.data(), g.lut_entries, y, r0, r1);
  } else {
    kt.rvq_apply(m, lut.f32.data(), g.lut_entries, y, r0, r1);
  }
}

// Seconds for one LUT build of n_vectors positions on one thread (plus the int8 shadow for VQ4P,
// or the int16 slots in the q16 LUT mode).
double lut_build_seconds(const kernels::KernelTable& kt, const ExpertGeometry& g, int n_vectors, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(std::size_t(n_vectors) * std::size_t(g.vec_dim));
  for (auto& v : x) v = u(rng);
  std::vector<std::vector<float>> books(std::size_t(g.stages));
  const float* book_ptrs[8] = {};
  for (int s = 0; s < g.stages && s < 8; ++s) {
    books[std::size_t(s)].resize(std::size_t(g.lut_entries) * std::size_t(g.vec_dim));
    for (auto& v : books[std::size_t(s)]) v = u(rng);
    book_ptrs[s] = books[std::size_t(s)].data();
  }
  const bool q16 = forward::lut_q16(g);
  Luts out;
  out.f32.resize(std::size_t(n_vectors) * std::size_t(g.stages) * std::size_t(g.lut_entries));
  out.q.resize(out.f32.size());
  out.q_scales.resize(std::size_t(kernels::lut_quant_blocks(n_vectors)));
  constexpr int kReps = 20;
  return best_seconds(3, [&] {
           for (int r = 0; r < kReps; ++r) {
             kt.rvq_lut_build(x.data(), book_ptrs, g.stages, g.lut_entries, g.vec_dim, 0, n_vectors, out.f32.data());
             if (g.packed6) {
               kt.rvq_lut_quantize(out.f32.data(), n_vectors, g.stages, g.lut_entries, out.q.data(),
                                   out.q_scales.data());
             } else if (q16) {
               kt.rvq_lut_to_q16(out.f32.data(), g.stages, g.lut_entries, 0, n_vectors);
             }
           }
         }) /
         kReps;
}

// Microseconds for one KDA head step on one thread, cycling over states of the model's size.
double kda_head_step_us(const kernels::KernelTable& kt, const ModelConfig& c) {
  const int D = c.kda_dim;
  const int heads = c.n_kda_layers() * c.kda_heads;  // one state per head and layer, as in decode
  if (D <= 0 || heads <= 0 || D > kernels::kKdaMaxDim) return 0;
  std::vector<float> states(std::size_t(heads) * std::size_t(D) * std::size_t(D), 0.01f);
  std::vector<float> vec(std::size_t(D), 0.05f), g(std::size_t(D), -0.01f);
  std::vector<float> outs(std::size_t(heads) * std::size_t(D));
  const double s = best_seconds(3, [&] {
    for (int h = 0; h < heads; ++h) {
      kt.kda_head_step(states.data() + std::size_t(h) * D * D, vec.data(), vec.data(), vec.data(), g.data(), 0.5f, D,
                       outs.data() + std::size_t(h) * D);
    }
  });
  return s / heads * 1e6;
}

double stage_ms(const profile::EngineProfile& p, profile::Stage s, int tokens) {
  return tokens > 0 ? p[s].seconds * 1e3 / tokens : 0.0;
}

}  // namespace

TrunkTraffic trunk_traffic(const Manifest& manifest, const ModelConfig& config) {
  TrunkTraffic t;
  std::uint64_t lm_head_matrix = 0;
  for (const TrunkTensorInfo& e : manifest.trunk) {
    std::string_view name = e.name;
    if (!manifest.tensor_prefix.empty()) {
      if (name.substr(0, manifest.tensor_prefix.size()) != manifest.tensor_prefix) continue;  // e.g. vision
      name.remove_prefix(manifest.tensor_prefix.size());
    }
    if (contains(name, "embed_tokens")) continue;  // one row per token
    if (contains(name, "lm_head") || name == "model.norm.weight") {
      t.lm_head += e.bytes;
      if (contains(name, "lm_head")) lm_head_matrix += e.bytes;
      continue;
    }
    const int layer = layer_of(name);
    if (layer < 0 || layer >= config.n_layers) {
      t.other += e.bytes;
    } else if (contains(name, ".self_attn.")) {
      (config.is_kda(layer) ? t.attn_kda : t.attn_mla) += e.bytes;
    } else if (contains(name, ".gate.weight") || contains(name, "e_score_correction_bias")) {
      t.router += e.bytes;
    } else if (contains(name, "mlp") || contains(name, "block_sparse_moe") || contains(name, "shared_experts")) {
      t.shared_ffn += e.bytes;
    } else {
      t.other += e.bytes;
    }
  }
  // Decode rows read the decode head's copy where the engine makes one (model::decode_head_copy):
  // its bytes, not the stored matrix's.
  if (const std::uint64_t copy = model::decode_head_copy_bytes(manifest); copy > 0) {
    t.lm_head = t.lm_head - lm_head_matrix + copy;
  }
  return t;
}

Result<FloorRates> measure_floor_rates(const ContainerInfo& info, const ModelConfig& config, int threads) {
  FloorRates r;
  const kernels::KernelTable& kt = kernels::active();
  ThreadPool pool(threads);
  r.threads = pool.size();
  r.isa = kt.isa;
  r.stream_gbs = measure_stream_gbs(pool);
  if (r.stream_gbs <= 0) return make_error(Errc::io, "floor: the streaming read benchmark summed the wrong value");

  if (config.n_moe_layers() > 0 && config.top_k > 0) {
    const ExpertGeometry& g = info.geometry;
    r.lut = g.packed6 ? "int8" : forward::lut_q16(g) ? "q16" : "f32";
    std::mt19937 rng(7);
    const FakeExperts f = make_experts(g, std::uint64_t(256) << 20);
    const int nv[3] = {g.cols[0] / g.vec_dim, g.cols[1] / g.vec_dim, g.cols[2] / g.vec_dim};
    const Luts luts[3] = {random_lut(g, nv[0], kt, rng), random_lut(g, nv[1], kt, rng), random_lut(g, nv[2], kt, rng)};
    std::vector<std::vector<float>> ys(std::size_t(f.count));
    for (auto& y : ys) y.resize(std::size_t(g.rows[0] + g.rows[1] + g.rows[2]));
    // Whole experts per thread: no join inside an expert, the best case for the lookups.
    auto all_pairs = [&] {
      pool.parallel_for(f.count, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          float* y = ys[std::size_t(i)].data();
          for (int k = 0; k < 3; ++k) {
            const kernels::RvqMatrix m{f.index[k][std::size_t(i)].data(), f.scales[k].data(), g.rows[k], nv[k],
                                       g.stages, g.packed6};
            apply(kt, g, m, luts[k], y, 0, m.rows);
            y += g.rows[k];
          }
        }
      });
    };
    // Rows of each expert split over the threads in 128-row chunks (how decode runs them): one
    // LUT working set shared by both cores' caches instead of two.
    auto split_rows = [&] {
      for (int i = 0; i < f.count; ++i) {
        float* y = ys[std::size_t(i)].data();
        for (int k = 0; k < 3; ++k) {
          const kernels::RvqMatrix m{f.index[k][std::size_t(i)].data(), f.scales[k].data(), g.rows[k], nv[k],
                                     g.stages, g.packed6};
          const std::int64_t blocks = (m.rows + kIndexBlockRows - 1) / kIndexBlockRows;
          pool.parallel_for(blocks, 2, [&](std::int64_t b, std::int64_t e) {
            apply(kt, g, m, luts[k], y, int(b * kIndexBlockRows),
                  int(std::min<std::int64_t>(e * kIndexBlockRows, m.rows)));
          });
          y += g.rows[k];
        }
      }
    };
    all_pairs();  // first touch
    // The floor takes the faster of the two ways to spread experts over the threads.
    const double s = std::min(best_seconds(3, all_pairs), best_seconds(3, split_rows));
    double lookups = 0;
    for (int k = 0; k < 3; ++k) lookups += double(g.rows[k]) * nv[k] * g.stages;
    r.pair_apply_us = s / f.count * 1e6;
    r.lookups_per_ns = lookups * f.count / s / 1e9;
    r.gateup_build_us = 2 * lut_build_seconds(kt, g, nv[0], rng) * 1e6;
    r.down_build_us = lut_build_seconds(kt, g, nv[2], rng) * 1e6;
  }
  r.kda_head_step_us = kda_head_step_us(kt, config);
  return r;
}

FloorReport floor_report(const ContainerInfo& info, const ModelConfig& c, const FloorRates& rates,
                         const profile::EngineProfile& decode, int decode_tokens, double decode_seconds,
                         int prompt_tokens) {
  using profile::Stage;
  FloorReport r;
  r.rates = rates;
  r.trunk = trunk_traffic(info.manifest, c);
  r.mean_position = prompt_tokens + decode_tokens / 2.0;
  const double bytes_per_ms = rates.stream_gbs * 1e6;
  const int T = decode_tokens;
  const int threads = std::max(rates.threads, 1);
  const double pairs = double(c.n_moe_layers()) * c.top_k;

  const double experts_floor = pairs * rates.pair_apply_us / 1e3 +
                               (c.n_moe_layers() * rates.gateup_build_us + pairs * rates.down_build_us) / threads / 1e3;
  r.stages.push_back({"experts", experts_floor,
                      stage_ms(decode, Stage::expert_matmul, T) + stage_ms(decode, Stage::lut_build, T),
                      std::to_string(int(pairs)) + " experts at the measured LUT apply and build rates"});
  r.stages.push_back({"lm_head", double(r.trunk.lm_head) / bytes_per_ms, stage_ms(decode, Stage::lm_head, T),
                      "its bytes at the streaming rate (decode's copy where made)"});
  const double kda_steps = double(c.n_kda_layers()) * c.kda_heads;
  r.stages.push_back({"attn_kda",
                      double(r.trunk.attn_kda) / bytes_per_ms + kda_steps * rates.kda_head_step_us / threads / 1e3,
                      stage_ms(decode, Stage::attn_kda, T), "projection bytes + head steps"});
  const double mla_cache = double(c.n_mla_layers()) * r.mean_position * double(c.kv_lora + c.qk_rope) * 4.0;
  r.stages.push_back({"attn_mla", (double(r.trunk.attn_mla) + mla_cache) / bytes_per_ms,
                      stage_ms(decode, Stage::attn_mla, T), "projection bytes + latent cache bytes"});
  r.stages.push_back({"shared_ffn", double(r.trunk.shared_ffn) / bytes_per_ms, stage_ms(decode, Stage::shared_ffn, T),
                      "dense and shared-expert bytes"});
  r.stages.push_back({"router", double(r.trunk.router) / bytes_per_ms,
                      stage_ms(decode, Stage::router, T) + stage_ms(decode, Stage::lookahead, T), "router bytes"});
  double rest = 0;
  for (Stage s : {Stage::embed, Stage::io_wait, Stage::sampling, Stage::other}) rest += stage_ms(decode, s, T);
  r.stages.push_back({"other", double(r.trunk.other) / bytes_per_ms, rest, "norms and the rest of the trunk"});
  for (const FloorStage& s : r.stages) r.floor_ms += s.floor_ms;
  r.step_ms = T > 0 ? decode_seconds * 1e3 / T : 0.0;
  return r;
}

nlohmann::json floor_json(const FloorReport& r) {
  nlohmann::json stages = nlohmann::json::array();
  for (const FloorStage& s : r.stages) {
    stages.push_back({{"stage", s.stage},
                      {"floor_ms", s.floor_ms},
                      {"measured_ms", s.measured_ms},
                      {"ratio", s.measured_ms > 0 ? s.floor_ms / s.measured_ms : 0.0},
                      {"basis", s.basis}});
  }
  return {{"rates",
           {{"threads", r.rates.threads},
            {"kernel_isa", r.rates.isa},
            {"lut", r.rates.lut},
            {"stream_gbs", r.rates.stream_gbs},
            {"lookups_per_ns", r.rates.lookups_per_ns},
            {"pair_apply_us", r.rates.pair_apply_us},
            {"gateup_build_us", r.rates.gateup_build_us},
            {"down_build_us", r.rates.down_build_us},
            {"kda_head_step_us", r.rates.kda_head_step_us}}},
          {"trunk_bytes_per_token",
           {{"lm_head", r.trunk.lm_head},
            {"attn_kda", r.trunk.attn_kda},
            {"attn_mla", r.trunk.attn_mla},
            {"shared_ffn", r.trunk.shared_ffn},
            {"router", r.trunk.router},
            {"other", r.trunk.other},
            {"total", r.trunk.total()}}},
          {"mean_position", r.mean_position},
          {"stages", stages},
          {"floor_ms", r.floor_ms},
          {"step_ms", r.step_ms},
          {"ratio", r.ratio()}};
}

void print_floor(const FloorReport& r) {
  std::printf("\ncompute floor (%d threads, %s, %s tables): stream %.1f GB/s, %.2f lookups/ns, expert %.0f us, "
              "LUT builds %.1f us (gate+up) %.1f us (down), KDA head step %.2f us\n",
              r.rates.threads, r.rates.isa.c_str(), r.rates.lut.empty() ? "no expert" : r.rates.lut.c_str(),
              r.rates.stream_gbs, r.rates.lookups_per_ns, r.rates.pair_apply_us,
              r.rates.gateup_build_us, r.rates.down_build_us, r.rates.kda_head_step_us);
  std::printf("%-11s %10s %12s %7s  %s\n", "stage", "floor ms", "measured ms", "floor%", "floor from");
  for (const FloorStage& s : r.stages) {
    std::printf("%-11s %10.2f %12.2f %6.0f%%  %s\n", s.stage.c_str(), s.floor_ms, s.measured_ms,
                s.measured_ms > 0 ? 100.0 * s.floor_ms / s.measured_ms : 0.0, s.basis.c_str());
  }
  std::printf("%-11s %10.2f %12.2f %6.0f%%  trunk %.1f MB per token\n", "step", r.floor_ms, r.step_ms,
              100.0 * r.ratio(), double(r.trunk.total()) / 1e6);
}

}  // namespace waste::cli::bench
