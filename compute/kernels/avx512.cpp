// AVX-512 table: entries without a 512-bit version reuse the AVX2 ones (every AVX-512 CPU we
// dispatch to also has AVX2 + FMA).
#include "compute/kernels/avx2.hpp"
#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail {

const KernelTable& avx512_table() {
  namespace impl = avx2_impl;
  static const KernelTable table{
      .isa = "avx512",
      .matvec = impl::matvec,
      .rvq_lut_build = impl::rvq_lut_build,
      .rvq_lut_quantize = impl::rvq_lut_quantize,
      .rvq_apply = impl::rvq_apply,
      .rvq_apply_vq4p = impl::rvq_apply_vq4p,
      .kda_head_step = impl::kda_head_step,
  };
  return table;
}

}  // namespace waste::kernels::detail
