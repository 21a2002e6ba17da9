// The AVX-512 RVQ entries (avx512_rvq.cpp), declared for avx512.cpp's table.
#pragma once

#include "compute/kernels/kernels.hpp"

namespace waste::kernels::detail::avx512_impl {
void rvq_lut_build(const float* x, const float* const* books, int stages, int entries, int vec_dim,
                   int v_begin, int v_end, float* lut);
void rvq_apply(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
               int row_end);
void rvq_apply_vq4p(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                    float* y, int row_begin, int row_end);
void rvq_lut_to_q16(float* lut, int stages, int entries, int v_begin, int v_end);
void rvq_lut_quantize(const float* lut, int n_vectors, int stages, int entries, std::int8_t* lut_q,
                      float* block_scales);
}  // namespace waste::kernels::detail::avx512_impl
