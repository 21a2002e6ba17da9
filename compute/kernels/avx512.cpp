// placeholder, replaced below
#include "compute/kernels/kernel_impl.hpp"
namespace waste::kernels::detail {
const KernelTable& avx512_table() {
  namespace impl = generic_impl;
  static const KernelTable table{"avx512", impl::matvec, impl::rvq_lut_build, impl::rvq_lut_quantize,
                                 impl::rvq_apply, impl::rvq_apply_vq4p, impl::kda_head_step};
  return table;
}
}
