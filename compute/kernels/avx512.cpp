// AVX-512 table: entries without a 512-bit version reuse the AVX2 ones (every AVX-512 CPU we
// dispatch to also has AVX2 + FMA).
#include "compute/kernels/avx2.hpp"
#include "compute/kernels/avx512_rvq.hpp"
#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail {

const KernelTable& avx512_table() {
  namespace impl = avx2_impl;
  static const KernelTable table{
      .isa = "avx512",
      .matvec = avx512_impl::matvec,
      .matmul = avx512_impl::matmul,
      .rvq_lut_build = avx512_impl::rvq_lut_build,
      .rvq_lut_quantize = avx512_impl::rvq_lut_quantize,
      .rvq_apply = avx512_impl::rvq_apply,
      .rvq_apply_vq4p = avx512_impl::rvq_apply_vq4p,
      .rvq_lut_to_q16 = avx512_impl::rvq_lut_to_q16,
      .rvq_apply_q16 = generic_impl::rvq_apply_q16,  // the VBMI table has the vector one
      .rvq_matmul = avx512_impl::rvq_matmul,
      .kda_head_step = avx512_impl::kda_head_step,
      .vq4p_from_registers = true,
      .weighted_rows = avx512_impl::weighted_rows,
      .exp_weights = avx512_impl::exp_matches_libm() ? avx512_impl::exp_weights : nullptr,
      .sum_exp = avx512_impl::sum_exp,
  };
  return table;
}

}  // namespace waste::kernels::detail
