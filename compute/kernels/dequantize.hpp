// One trunk row dequantised exactly (f32 as stored, else q * fp16 scale per group): what MLA's
// weighted rows, the vision tower's position grid and the tests multiply by. Scalar, in generic.cpp.
#pragma once

#include <cstdint>

#include "compute/kernels/kernels.hpp"

namespace waste::kernels {

void dequantize_row(const QuantMatrix& w, std::int64_t row, float* out);

}  // namespace waste::kernels
