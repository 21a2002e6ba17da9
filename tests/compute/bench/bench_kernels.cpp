// Single-thread kernel timings for every ISA this CPU supports (docs/design/dispatch.md).
// Not a test: numbers depend on the machine. Shapes are Kimi-Linear's (hidden 2304, expert
// inter 1024, vocab 163840). Usage: bench_kernels [seconds_per_case [rvq_reps]] |
// bench_kernels rvq [reps] | bench_kernels trunk [reps] | bench_kernels lm_head [rounds [huge]] |
// bench_kernels lm_head_tokens [reps [q4]] | bench_kernels sampling [reps]
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <string_view>
#include <vector>

#include <atomic>
#include <cstring>
#include <ctime>
#include <random>

#include <sys/mman.h>

#if defined(__x86_64__)
#include "compute/kernels/avx2.hpp"
#endif
#include "compute/kernels/int8_matmul.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/model/decode_head.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "compute/sampling/sampler.hpp"
#include "shared/fp16.hpp"
#include "../test_kernels_fixtures.hpp"

namespace {

template <class F>
double time_us(double seconds, F&& fn) {
  using clock = std::chrono::steady_clock;
  fn();  // warm up
  long calls = 0;
  const auto start = clock::now();
  double elapsed = 0;
  do {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < seconds);
  return elapsed / calls * 1e6;
}


// Minimum over `reps` calls of this thread's CPU time, in ns: best-of-N, and time spent
// descheduled (the bench machine is shared) does not count.
template <class F>
double best_ns(int reps, F&& fn) {
  const auto cpu_ns = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
  };
  fn();  // warm up
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double start = cpu_ns();
    fn();
    best = std::min(best, cpu_ns() - start);
  }
  return best;
}

// RVQ section: the Kimi-Linear expert shapes (gate/up 1024 x 2304, down 2304 x 1024), VQ3R
// (3 stages x 256 entries) and VQ4P, single thread, best of `reps`.
void bench_rvq(int reps) {
  using namespace waste;
  struct Shape { const char* name; int rows, cols; };
  std::printf("\nRVQ, best of %d, single thread (lookups = rows x vectors x stages)\n", reps);
  std::printf("%-8s %-10s %12s %10s %12s %12s %12s %12s %10s %10s %10s\n", "isa", "shape", "vq3r_us", "ns/row",
              "lookups/ns", "lut_build_us", "vq4p_us", "v4p_lk/ns", "to_q16_us", "q16_us", "q16_lk/ns");
  for (const Shape shape : {Shape{"gate", 1024, 2304}, Shape{"down", 2304, 1024}}) {
    const auto vq3 = test::make_expert_matrix(shape.rows, shape.cols, 3, false, 11);
    const auto vq4p = test::make_expert_matrix(shape.rows, shape.cols, 4, true, 12);
    const std::vector<float> x = test::random_floats(static_cast<std::size_t>(shape.cols), 13);
    const int nv = shape.cols / 8;
    std::vector<float> y(static_cast<std::size_t>(shape.rows)), lut3(nv * 3 * 256), lut4(nv * 4 * 64);
    std::vector<std::int8_t> lut_q(lut4.size());
    std::vector<float> block_scales(kernels::lut_quant_blocks(nv));
    kernels::generic().rvq_lut_build(x.data(), vq4p.book_ptrs.data(), 4, 64, 8, 0, nv, lut4.data());
    kernels::generic().rvq_lut_quantize(lut4.data(), nv, 4, 64, lut_q.data(), block_scales.data());
    const double lookups3 = double(shape.rows) * nv * 3, lookups4 = double(shape.rows) * nv * 4;
    for (const kernels::KernelTable* k : kernels::supported()) {
      const int n = std::string_view(k->isa) == "generic" ? std::max(1, reps / 8) : reps;
      const double t_build = best_ns(n, [&] {
        k->rvq_lut_build(x.data(), vq3.book_ptrs.data(), 3, 256, 8, 0, nv, lut3.data());
      });
      const double t_vq3 = best_ns(n, [&] {
        k->rvq_apply(vq3.view, lut3.data(), 256, y.data(), 0, shape.rows);
      });
      const double t_vq4p = best_ns(n, [&] {
        k->rvq_apply_vq4p(vq4p.view, lut_q.data(), block_scales.data(), y.data(), 0, shape.rows);
      });
      // q16 (WASTE_LUT=q16): the in-place conversion of a fresh copy of the f32 tables, then the apply.
      std::vector<float> lut16 = lut3;
      const double t_to_q16 = best_ns(n, [&] {
        std::copy(lut3.begin(), lut3.end(), lut16.begin());
        k->rvq_lut_to_q16(lut16.data(), 3, 256, 0, nv);
      });
      const double t_q16 = best_ns(n, [&] { k->rvq_apply_q16(vq3.view, lut16.data(), 256, y.data(), 0, shape.rows); });
      std::printf("%-8s %-10s %12.1f %10.1f %12.2f %12.1f %12.1f %12.2f %10.1f %10.1f %10.2f\n", k->isa, shape.name,
                  t_vq3 / 1e3, t_vq3 / shape.rows, lookups3 / t_vq3, t_build / 1e3, t_vq4p / 1e3,
                  lookups4 / t_vq4p, t_to_q16 / 1e3, t_q16 / 1e3, lookups3 / t_q16);
    }
#if defined(__x86_64__)
    // The AVX2 table's VQ4P apply before its byte shuffles: the int8 tables widened and gathered.
    if (kernels::find("avx2") != nullptr) {
      const double t_gather = best_ns(reps, [&] {
        kernels::detail::avx2_impl::rvq_apply_vq4p_gather(vq4p.view, lut_q.data(), block_scales.data(), y.data(), 0,
                                                          shape.rows);
      });
      std::printf("%-8s %-10s vq4p by gathers (avx2's before): %.1f us, %.2f lookups/ns\n", "avx2", shape.name,
                  t_gather / 1e3, lookups4 / t_gather);
    }
#endif
  }
}

// ---- Trunk matvec / matmul section ----------------------------------------------------------

// A trunk matrix with random codes and scales near 0.01, without the f32 copies the test
// fixture keeps (the lm_head shape would need 3 GB of them).
struct BenchMatrix {
  std::vector<std::uint8_t> payload;
  std::vector<std::uint16_t> scales;
  waste::kernels::QuantMatrix view{};
  double bytes() const { return double(payload.size()) + 2.0 * double(scales.size()); }
};

BenchMatrix bench_matrix(std::uint8_t fmt, std::int64_t rows, std::int64_t cols) {
  const std::int64_t groups = (cols + 127) / 128;
  const std::int64_t stride = fmt == 2 ? groups * 128 : fmt == 3 ? groups * 64 : groups * 48 + 1;
  BenchMatrix m;
  m.payload.resize(static_cast<std::size_t>(rows * stride));
  std::mt19937_64 rng(fmt);
  for (std::size_t i = 0; i + 8 <= m.payload.size(); i += 8) {
    const std::uint64_t bits = rng();
    std::memcpy(m.payload.data() + i, &bits, 8);
  }
  m.scales.resize(static_cast<std::size_t>(rows * groups));
  for (std::size_t i = 0; i < m.scales.size(); ++i) {
    m.scales[i] = waste::f32_to_fp16(0.01f + 0.001f * static_cast<float>(i % 7));
  }
  m.view = {m.payload.data(), m.scales.data(), rows, cols, stride, 128, fmt};
  return m;
}

// The table's matmul; a table without one (an older tree, for old-vs-new runs) gets n matvecs.
template <class Table>
void matmul_or_loop(const Table& k, const waste::kernels::QuantMatrix& w, const float* x, int n,
                    float* y, std::int64_t begin, std::int64_t end) {
  if constexpr (requires { k.matmul; }) {
    k.matmul(w, x, w.cols, n, y, w.rows, begin, end);
  } else {
    for (int t = 0; t < n; ++t) k.matvec(w, x + t * w.cols, y + t * w.rows, begin, end);
  }
}

// Best of `reps` timings in us (the minimum: the least disturbed run on a shared machine).
// cpu_time: this thread's CPU time, which time slices lost to other processes do not inflate
// (single-thread cases); otherwise wall time (the 2-thread cases).
template <class F>
double best_us(int reps, bool cpu_time, F&& fn) {
  const auto now_us = [cpu_time] {
    timespec ts{};
    clock_gettime(cpu_time ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
  };
  fn();  // warm up
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double start = now_us();
    fn();
    best = std::min(best, now_us() - start);
  }
  return best;
}

// Trunk matvec in GB/s of weight bytes (payload + scales): one thread (CPU time), two threads
// (wall time, row chunks as in forward::matvec); then matmul of 16 and 64 tokens against as many
// matvec calls, one thread.
void bench_trunk(int reps) {
  using namespace waste;
  struct Case { const char* name; std::uint8_t fmt; std::int64_t rows, cols; };
  const Case cases[] = {{"lm_head q8g 163840x2304", 2, 163840, 2304},
                        {"q4g 4096x2304", 3, 4096, 2304},
                        {"q4g 2304x4096", 3, 2304, 4096},
                        {"q8g 2304x2304", 2, 2304, 2304},
                        {"q3g 2304x2304", 7, 2304, 2304}};
  ThreadPool pool2(2);
  std::printf("\nTrunk matvec, best of %d\n%-8s %-24s %10s %8s %10s %8s\n", reps, "isa", "shape",
              "1t_us", "1t_GB/s", "2t_us", "2t_GB/s");
  for (const Case& c : cases) {
    const BenchMatrix m = bench_matrix(c.fmt, c.rows, c.cols);
    const std::vector<float> x = test::random_floats(static_cast<std::size_t>(c.cols), 7);
    std::vector<float> y(static_cast<std::size_t>(c.rows));
    if (c.rows > 100000) {
      // The roofline at this moment (the machine is shared): a plain read of the same bytes.
      std::atomic<std::uint64_t> sink{0};
      const auto read = [&](std::int64_t b, std::int64_t e) {
        const std::size_t words = m.payload.size() / 8;
        std::uint64_t sum = 0;
        for (std::size_t i = words * b / c.rows; i < words * e / c.rows; ++i) {
          std::uint64_t v;
          std::memcpy(&v, m.payload.data() + 8 * i, 8);
          sum += v;
        }
        sink += sum;
      };
      const double r1 = best_us(reps / 3 + 2, true, [&] { read(0, c.rows); });
      const double r2 = best_us(reps / 3 + 2, false, [&] { pool2.parallel_for(c.rows, 64, read); });
      std::printf("%-8s %-24s %10.0f %8.2f %10.0f %8.2f%s\n", "read", c.name, r1, m.bytes() / r1 / 1e3,
                  r2, m.bytes() / r2 / 1e3, sink == 42 ? " " : "");
    }
    for (const kernels::KernelTable* k : kernels::supported()) {
      if (std::string_view(k->isa) == "generic" && c.rows > 100000) continue;  // far too slow
      const int n = std::string_view(k->isa) == "generic" ? 2 : c.rows > 100000 ? std::max(2, reps / 3) : reps;
      const double us[2] = {
          best_us(n, true, [&] { k->matvec(m.view, x.data(), y.data(), 0, c.rows); }),
          best_us(n, false, [&] {
            pool2.parallel_for(c.rows, 64, [&](std::int64_t b, std::int64_t e) {
              k->matvec(m.view, x.data(), y.data(), b, e);
            });
          })};
      std::printf("%-8s %-24s %10.0f %8.2f %10.0f %8.2f\n", k->isa, c.name, us[0],
                  m.bytes() / us[0] / 1e3, us[1], m.bytes() / us[1] / 1e3);
    }
    if (kernels::int8_matmul_supports(m.view)) {
      // The int8 product at one token (decode's trunk products with the int8 rule), input quantised per call.
      const kernels::MatmulI8Fn i8 = kernels::matmul_i8();
      kernels::Int8Acts a;
      const double us[2] = {
          best_us(reps, true, [&] {
            kernels::quantize_acts(x.data(), c.cols, 1, c.cols, a);
            i8(m.view, a, y.data(), 0, 0, c.rows);
          }),
          best_us(reps, false, [&] {
            kernels::quantize_acts(x.data(), c.cols, 1, c.cols, a);
            pool2.parallel_for(c.rows, 64, [&](std::int64_t b, std::int64_t e) { i8(m.view, a, y.data(), 0, b, e); });
          })};
      std::printf("%-8s %-24s %10.0f %8.2f %10.0f %8.2f\n", kernels::matmul_i8_is_vector() ? "i8_vnni" : "i8_ref",
                  c.name, us[0], m.bytes() / us[0] / 1e3, us[1], m.bytes() / us[1] / 1e3);
    }
  }
  std::printf("\nTrunk matmul vs matvec calls, one thread, best of %d\n%-8s %-24s %6s %14s %14s %8s\n",
              reps, "isa", "shape", "tokens", "matvecs_us/tok", "matmul_us/tok", "speedup");
  for (const Case& c : {cases[1], cases[2], cases[3]}) {
    const BenchMatrix m = bench_matrix(c.fmt, c.rows, c.cols);
    for (int n : {16, 64}) {
      const std::vector<float> x = test::random_floats(static_cast<std::size_t>(c.cols * n), 8);
      std::vector<float> y(static_cast<std::size_t>(c.rows * n));
      for (const kernels::KernelTable* k : kernels::supported()) {
        if (std::string_view(k->isa) == "generic") continue;
        const int r = std::max(2, reps / (n / 8));
        const double loop = best_us(r, true, [&] {
          for (int t = 0; t < n; ++t) {
            k->matvec(m.view, x.data() + t * c.cols, y.data() + t * c.rows, 0, c.rows);
          }
        });
        const double mm = best_us(r, true, [&] { matmul_or_loop(*k, m.view, x.data(), n, y.data(), 0, c.rows); });
        std::printf("%-8s %-24s %6d %14.1f %14.1f %7.2fx\n", k->isa, c.name, n, loop / n, mm / n,
                    loop / mm);
      }
    }
  }
}
// The lm_head matvec (Q8G 163,840 x 2,304, the engine's thread pool split as forward::matvec) and
// a plain read of the same bytes, measured alternately in `rounds` rounds (best of 3 each) so that
// both see the same load; per round the ratio kernel / read, then medians. Two threads: wall time;
// one thread: CPU time. Every AVX-512 table and the active one. huge: the payload copied into
// anonymous memory advised MADV_HUGEPAGE (2 MB pages where THP allows), else 4 KB pages like the
// engine's mmapped trunk.
void bench_lm_head(int rounds, bool huge) {
  using namespace waste;
  constexpr std::int64_t kRows = 163840, kCols = 2304;
  BenchMatrix m = bench_matrix(2, kRows, kCols);
  const std::size_t payload_bytes = m.payload.size();
  const std::size_t mapped = (payload_bytes + (std::size_t{2} << 20) - 1) & ~((std::size_t{2} << 20) - 1);
  void* region = nullptr;
  if (huge) {
    region = mmap(nullptr, mapped + (std::size_t{2} << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
      std::perror("mmap");
      return;
    }
    // 2 MB aligned inside the mapping, so that whole huge pages cover it.
    auto* aligned = reinterpret_cast<std::uint8_t*>(
        (reinterpret_cast<std::uintptr_t>(region) + (std::uintptr_t{2} << 20) - 1) & ~((std::uintptr_t{2} << 20) - 1));
    const int advised = madvise(aligned, mapped, MADV_HUGEPAGE);
    std::memcpy(aligned, m.payload.data(), payload_bytes);
    m.view.payload = aligned;
    std::printf("\npayload in anonymous memory, madvise(MADV_HUGEPAGE) %s\n", advised == 0 ? "accepted" : "refused");
  }
  const std::uint8_t* base = m.view.payload;
  const std::vector<float> x = test::random_floats(static_cast<std::size_t>(kCols), 7);
  std::vector<float> y(static_cast<std::size_t>(kRows));
  ThreadPool pool2(2);
  std::atomic<std::uint64_t> sink{0};
  // Four independent sums so that the loop is bound by the loads, not by one add chain.
  const auto read = [&](std::int64_t b, std::int64_t e) {
    const std::size_t words = payload_bytes / 8;
    std::uint64_t s[4] = {};
    std::size_t i = words * b / kRows;
    const std::size_t end = words * e / kRows;
    for (; i + 4 <= end; i += 4) {
      for (int j = 0; j < 4; ++j) {
        std::uint64_t v;
        std::memcpy(&v, base + 8 * (i + j), 8);
        s[j] += v;
      }
    }
    sink += s[0] + s[1] + s[2] + s[3];
  };
  std::vector<const kernels::KernelTable*> tables;
  for (const kernels::KernelTable* k : kernels::supported()) {
    if (std::string_view(k->isa).starts_with("avx512") || k == &kernels::active()) tables.push_back(k);
  }
  struct Series { std::vector<double> gbs2, gbs1, ratio2, ratio1; };
  Series rd, i8s;
  std::vector<Series> ks(tables.size());
  const bool with_i8 = kernels::int8_matmul_supports(m.view);
  const kernels::MatmulI8Fn i8 = kernels::matmul_i8();
  kernels::Int8Acts acts;
  const double bytes = m.bytes();
  for (int round = 0; round < rounds; ++round) {
    const double r2 = bytes / best_us(3, false, [&] { pool2.parallel_for(kRows, 64, read); }) / 1e3;
    const double r1 = bytes / best_us(2, true, [&] { read(0, kRows); }) / 1e3;
    rd.gbs2.push_back(r2);
    rd.gbs1.push_back(r1);
    for (std::size_t i = 0; i < tables.size(); ++i) {
      const kernels::KernelTable* k = tables[i];
      const double k2 = bytes / best_us(3, false, [&] {
        pool2.parallel_for(kRows, 64, [&](std::int64_t b, std::int64_t e) { k->matvec(m.view, x.data(), y.data(), b, e); });
      }) / 1e3;
      const double k1 = bytes / best_us(2, true, [&] { k->matvec(m.view, x.data(), y.data(), 0, kRows); }) / 1e3;
      ks[i].gbs2.push_back(k2);
      ks[i].gbs1.push_back(k1);
      ks[i].ratio2.push_back(k2 / r2);
      ks[i].ratio1.push_back(k1 / r1);
    }
    if (with_i8) {  // the decode rule's head: the int8 product, its input quantised per call
      const auto run_i8 = [&](bool two) {
        kernels::quantize_acts(x.data(), kCols, 1, kCols, acts);
        if (two) {
          pool2.parallel_for(kRows, 64, [&](std::int64_t b, std::int64_t e) { i8(m.view, acts, y.data(), kRows, b, e); });
        } else {
          i8(m.view, acts, y.data(), kRows, 0, kRows);
        }
      };
      const double k2 = bytes / best_us(3, false, [&] { run_i8(true); }) / 1e3;
      const double k1 = bytes / best_us(2, true, [&] { run_i8(false); }) / 1e3;
      i8s.gbs2.push_back(k2);
      i8s.gbs1.push_back(k1);
      i8s.ratio2.push_back(k2 / r2);
      i8s.ratio1.push_back(k1 / r1);
    }
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  std::printf("\nlm_head Q8G %lldx%lld (%.0f MB), %d rounds, medians; 2t: wall, engine pool; 1t: CPU time\n",
              static_cast<long long>(kRows), static_cast<long long>(kCols), bytes / 1e6, rounds);
  std::printf("%-10s %9s %9s %9s %9s %9s\n", "isa", "2t_GB/s", "2t_ms", "2t_%read", "1t_GB/s", "1t_%read");
  std::printf("%-10s %9.2f %9.2f %9s %9.2f %9s%s\n", "read", median(rd.gbs2), bytes / median(rd.gbs2) / 1e6, "100%",
              median(rd.gbs1), "100%", sink == 42 ? " " : "");
  for (std::size_t i = 0; i < tables.size(); ++i) {
    std::printf("%-10s %9.2f %9.2f %8.0f%% %9.2f %8.0f%%\n", tables[i]->isa, median(ks[i].gbs2),
                bytes / median(ks[i].gbs2) / 1e6, 100 * median(ks[i].ratio2), median(ks[i].gbs1),
                100 * median(ks[i].ratio1));
  }
  if (with_i8) {
    std::printf("%-10s %9.2f %9.2f %8.0f%% %9.2f %8.0f%%\n", kernels::matmul_i8_is_vector() ? "i8_vnni" : "i8_ref",
                median(i8s.gbs2), bytes / median(i8s.gbs2) / 1e6, 100 * median(i8s.ratio2), median(i8s.gbs1),
                100 * median(i8s.ratio1));
  }
  if (region != nullptr) munmap(region, mapped + (std::size_t{2} << 20));
}
// The lm_head (Q8G 163,840 x 2,304) against 1..8 tokens at once, as a batched decode pass takes
// it (forward::matvec_tokens: the table's matmul, row chunks over two threads): ms per call and
// per token, and the weight bytes' rate. One token is matvec's tile; more share each weight load.
// q4: the same shape in Q4G, the trunk projections' format (too large for the cache, as the
// trunk's matrices are together). q6: the decode head's Q6P copy of the Q8G matrix
// (compute/model/decode_head.hpp), the int8 product only (the f32 kernels do not read it).
void bench_lm_head_tokens(int reps, std::string_view fmt) {
  using namespace waste;
  constexpr std::int64_t kRows = 163840, kCols = 2304;
  const bool q4 = fmt == "q4", q6 = fmt == "q6";
  BenchMatrix m = bench_matrix(q4 ? 3 : 2, kRows, kCols);
  ThreadPool pool2(2);
  if (q6) {
    auto head = model::DecodeHead::requantize(m.view, forward::HeadMode::q6, pool2);
    if (!head) std::abort();
    m.payload.assign(head->matrix().payload, head->matrix().payload + head->matrix().rows * head->matrix().row_stride);
    m.scales.assign(head->matrix().scales, head->matrix().scales + kRows * (kCols / 128));
    m.view = head->matrix();
    m.view.payload = m.payload.data();
    m.view.scales = m.scales.data();
  }
  std::printf("\nlm_head %s %lldx%lld against n tokens, two threads, best of %d\n%-10s %6s %10s %12s %9s\n",
              q6 ? "Q6P" : q4 ? "Q4G" : "Q8G", static_cast<long long>(kRows), static_cast<long long>(kCols), reps, "isa",
              "tokens", "ms", "ms/token", "GB/s");
  for (const int n : {1, 2, 4, 8, 16}) {
    const std::vector<float> x = test::random_floats(static_cast<std::size_t>(kCols * n), 9);
    std::vector<float> y(static_cast<std::size_t>(kRows * n));
    for (const kernels::KernelTable* k : kernels::supported()) {
      if (std::string_view(k->isa) == "generic" || q6) continue;
      const double us = best_us(reps, false, [&] {
        pool2.parallel_for(kRows, 64, [&](std::int64_t b, std::int64_t e) {
          if (n == 1) {
            k->matvec(m.view, x.data(), y.data(), b, e);
          } else {
            matmul_or_loop(*k, m.view, x.data(), n, y.data(), b, e);
          }
        });
      });
      std::printf("%-10s %6d %10.2f %12.2f %9.2f\n", k->isa, n, us / 1e3, us / 1e3 / n, m.bytes() / us / 1e3);
    }
    if (kernels::int8_matmul_supports(m.view)) {
      const kernels::MatmulI8Fn i8 = kernels::matmul_i8();
      kernels::Int8Acts a;
      const double us = best_us(reps, false, [&] {
        kernels::quantize_acts(x.data(), kCols, n, kCols, a);
        pool2.parallel_for(kRows, 64, [&](std::int64_t b, std::int64_t e) { i8(m.view, a, y.data(), kRows, b, e); });
      });
      std::printf("%-10s %6d %10.2f %12.2f %9.2f\n", kernels::matmul_i8_is_vector() ? "i8_vnni" : "i8_ref", n,
                  us / 1e3, us / 1e3 / n, m.bytes() / us / 1e3);
    }
  }
}
}  // namespace

// Prefill's expert products: n tokens through one 1024 x 2304 VQ3R matrix, by n LUT applies
// (the gate/up LUTs are per token, shared by its experts, so not counted) or by one rvq_matmul.
void bench_prefill(double seconds) {
  using namespace waste;
  const int hidden = 2304, inter = 1024, nv = hidden / 8;
  const auto vq3 = test::make_expert_matrix(inter, hidden, 3, false, 3);
  const std::vector<float> x = test::random_floats(16 * std::size_t(hidden), 5);
  std::vector<float> lut3(std::size_t(nv) * 3 * 256), y(16 * std::size_t(inter));
  kernels::generic().rvq_lut_build(x.data(), vq3.book_ptrs.data(), 3, 256, 8, 0, nv, lut3.data());
  std::printf("\nPrefill expert products, 1024 x 2304 VQ3R, one thread: us per matrix\n%-10s %6s %12s %12s %8s\n",
              "isa", "tokens", "lut_applies", "rvq_matmul", "ratio");
  for (const kernels::KernelTable* k : kernels::supported()) {
    if (std::string_view(k->isa) == "generic") continue;
    for (const int n : {1, 2, 4, 8, 16}) {
      const double lut = time_us(seconds, [&] {
        for (int t = 0; t < n; ++t) k->rvq_apply(vq3.view, lut3.data(), 256, y.data(), 0, inter);
      });
      const double mm = time_us(seconds, [&] {
        k->rvq_matmul(vq3.view, vq3.book_ptrs.data(), 8, x.data(), hidden, n, y.data(), inter, 0, inter);
      });
      std::printf("%-10s %6d %12.1f %12.1f %7.2fx\n", k->isa, n, lut, mm, lut / mm);
    }
  }
}

// One stream's sampling over the Kimi-Linear vocabulary: the sampler's weights (exp_weights), the
// logprob's normaliser (sum_exp), and a whole Sampler::sample, each ISA's kernel against the
// reference, one thread, best of `reps` (CPU time).
void bench_sampling(int reps) {
  constexpr int kVocab = 163840;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> logits(kVocab), weights(kVocab);
  for (float& v : logits) v = dist(rng);
  const float max = *std::max_element(logits.begin(), logits.end());
  std::printf("\nsampling over %d logits, one thread, best of %d, us\n%-12s %12s %12s\n", kVocab, reps, "isa",
              "exp_weights", "sum_exp");
  std::printf("%-12s %12.1f %12.1f\n", "reference",
              best_ns(reps, [&] { waste::kernels::exp_weights_reference(logits.data(), kVocab, max, 0.8f, weights.data()); }) / 1e3,
              best_ns(reps, [&] { volatile double s = waste::kernels::sum_exp_reference(logits.data(), kVocab, max); (void)s; }) / 1e3);
  for (const waste::kernels::KernelTable* table : waste::kernels::supported()) {
    std::printf("%-12s %12.1f %12.1f\n", table->isa,
                best_ns(reps, [&] { waste::kernels::exp_weights(*table, logits.data(), kVocab, max, 0.8f, weights.data()); }) / 1e3,
                best_ns(reps, [&] { volatile double s = waste::kernels::sum_exp(*table, logits.data(), kVocab, max); (void)s; }) / 1e3);
  }
  waste::Sampler sampler({.temperature = 0.8f, .seed = 1});
  std::printf("Sampler::sample (active table, temperature 0.8): %.1f us\n",
              best_ns(reps, [&] { volatile int t = sampler.sample(logits); (void)t; }) / 1e3);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "prefill") {
    bench_prefill(argc > 2 ? std::atof(argv[2]) : 0.3);
    return 0;
  }
  if (argc > 1 && std::string_view(argv[1]) == "trunk") {  // the trunk matvec / matmul section only
    bench_trunk(argc > 2 ? std::atoi(argv[2]) : 10);
    return 0;
  }
  if (argc > 1 && std::string_view(argv[1]) == "lm_head") {  // lm_head against a read, alternately
    bench_lm_head(argc > 2 ? std::atoi(argv[2]) : 7, argc > 3 && std::string_view(argv[3]) == "huge");
    return 0;
  }
  if (argc > 1 && std::string_view(argv[1]) == "lm_head_tokens") {  // lm_head against 1..8 tokens
    bench_lm_head_tokens(argc > 2 ? std::atoi(argv[2]) : 5, argc > 3 ? std::string_view(argv[3]) : "q8");
    return 0;
  }
  if (argc > 1 && std::string_view(argv[1]) == "sampling") {
    bench_sampling(argc > 2 ? std::atoi(argv[2]) : 50);
    return 0;
  }
  if (argc > 1 && std::string_view(argv[1]) == "rvq") {  // the RVQ section only
    bench_rvq(argc > 2 ? std::atoi(argv[2]) : 20);
    return 0;
  }
  const double seconds = argc > 1 ? std::atof(argv[1]) : 0.3;
  using namespace waste;
  const int hidden = 2304, inter = 1024;
  const auto q4 = test::make_trunk_matrix(3, hidden, hidden, 1);
  const auto q8 = test::make_trunk_matrix(2, hidden, hidden, 2);
  const auto vq3 = test::make_expert_matrix(inter, hidden, 3, false, 3);
  const auto vq4p = test::make_expert_matrix(inter, hidden, 4, true, 4);
  const std::vector<float> x = test::random_floats(hidden, 5);
  const int nv = hidden / 8;
  std::vector<float> y(hidden), lut3(nv * 3 * 256), lut4(nv * 4 * 64);
  std::vector<std::int8_t> lut_q(lut4.size());
  std::vector<float> block_scales(kernels::lut_quant_blocks(nv));
  std::vector<float> S(128 * 128, 0.01f), o(128);
  const std::vector<float> kq = test::random_floats(128, 6), g(128, -0.01f);

  std::printf("%-8s %12s %12s %12s %12s %12s %12s %12s\n", "isa", "q4g_mv_us", "q8g_mv_us",
              "lut3_us", "vq3r_us", "lutq_us", "vq4p_us", "kda128_us");
  for (const kernels::KernelTable* k : kernels::supported()) {
    const double t_q4 = time_us(seconds, [&] { k->matvec(q4.view, x.data(), y.data(), 0, hidden); });
    const double t_q8 = time_us(seconds, [&] { k->matvec(q8.view, x.data(), y.data(), 0, hidden); });
    const double t_lut = time_us(seconds, [&] {
      k->rvq_lut_build(x.data(), vq3.book_ptrs.data(), 3, 256, 8, 0, nv, lut3.data());
    });
    const double t_vq3 = time_us(seconds, [&] {
      k->rvq_apply(vq3.view, lut3.data(), 256, y.data(), 0, inter);
    });
    k->rvq_lut_build(x.data(), vq4p.book_ptrs.data(), 4, 64, 8, 0, nv, lut4.data());
    const double t_lutq = time_us(seconds, [&] {
      k->rvq_lut_quantize(lut4.data(), nv, 4, 64, lut_q.data(), block_scales.data());
    });
    const double t_vq4p = time_us(seconds, [&] {
      k->rvq_apply_vq4p(vq4p.view, lut_q.data(), block_scales.data(), y.data(), 0, inter);
    });
    const double t_kda = time_us(seconds, [&] {
      k->kda_head_step(S.data(), kq.data(), kq.data(), kq.data(), g.data(), 0.5f, 128, o.data());
    });
    std::printf("%-8s %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.2f\n", k->isa, t_q4, t_q8,
                t_lut, t_vq3, t_lutq, t_vq4p, t_kda);
  }
  bench_rvq(argc > 2 ? std::atoi(argv[2]) : 20);
  bench_trunk(10);
  return 0;
}
