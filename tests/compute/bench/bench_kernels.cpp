// Single-thread kernel timings for every ISA this CPU supports (docs/design/dispatch.md).
// Not a test: numbers depend on the machine. Shapes are Kimi-Linear's (hidden 2304, expert
// inter 1024). Usage: bench_kernels [seconds_per_case]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "compute/kernels/kernels.hpp"
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

}  // namespace

int main(int argc, char** argv) {
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
  return 0;
}
