// Float loops the probes run over every entry of the matrices they measure: whether a matrix is
// all finite, and a copy of it with NaN and Inf read as 0 (what the SVDs can take), as it is or
// transposed. Built for AVX-512 and AVX2 beside the portable copy (model/util/simd_clones.h): built for
// SSE2 alone, such loops ran one double at a time (8–9 µs of an overlapped Titans-MLP token's
// probes, AMD VM).
#pragma once
#include <cstdint>

namespace memscope::model {

// Whether none of x[0..n) is NaN or Inf.
bool all_finite(const float* x, int64_t n);

// to = from with NaN and Inf as 0; returns whether from was all finite.
bool copy_finite(const float* __restrict from, float* __restrict to, int64_t n);

// The same for a [rows, cols] matrix, written transposed ([cols, rows]).
bool copy_finite_transposed(const float* __restrict from, int64_t rows, int64_t cols, float* __restrict to);

}  // namespace memscope::model
