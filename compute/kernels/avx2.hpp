// The AVX2 entries, declared so avx512.cpp can reuse the ones it does not specialise.
#pragma once

#include "compute/kernels/kernels.hpp"

namespace waste::kernels::detail::avx2_impl {
// matvec / matmul: avx2_matvec.cpp.
void matvec(const QuantMatrix& w, const float* x, float* y, std::int64_t row_begin,
            std::int64_t row_end);
void matmul(const QuantMatrix& w, const float* x, std::int64_t x_stride, int n, float* y,
            std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end);
void rvq_lut_build(const float* x, const float* const* books, int stages, int entries, int vec_dim,
                   int v_begin, int v_end, float* lut);
void rvq_lut_quantize(const float* lut, int n_vectors, int stages, int entries, std::int8_t* lut_q,
                      float* block_scales);
void rvq_apply(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
               int row_end);
// rvq_apply with its table lookups named: rvq_apply picks gathers or scalar loads once per process
// (avx2.cpp: rvq_scalar_loads); tests run both on any AVX2 machine.
enum class RvqLookups { gather, loads };
void rvq_apply_lookups(RvqLookups how, const RvqMatrix& m, const float* lut, int entries, float* y,
                       int row_begin, int row_end);
// VQ4P: the stage tables by in-lane byte shuffles (avx2_vq4p.cpp; the table's), or widened to int32
// and gathered (avx2.cpp; kept for comparison, tested equal).
void rvq_apply_vq4p_shuffle(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                            float* y, int row_begin, int row_end);
void rvq_apply_vq4p_gather(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                           float* y, int row_begin, int row_end);
// rvq_matmul: avx2_rvq_matmul.cpp (2-row tiles; the AVX-512 table has 4-row ones).
void rvq_matmul(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x,
                std::int64_t x_stride, int n, float* y, std::int64_t y_stride, int row_begin,
                int row_end);
void kda_head_step(float* S, const float* q, const float* k, const float* v, const float* g,
                   float beta, int D, float* o);
// avx2_exp.cpp: sampling's weights (the C library's expf, bit for bit, where exp_matches_libm()
// says the running one is the one repeated) and a logprob's normaliser.
void exp_weights(const float* x, int n, float sub, float div, float* y);
bool exp_matches_libm();
double sum_exp(const float* x, std::int64_t n, double sub);
}  // namespace waste::kernels::detail::avx2_impl
