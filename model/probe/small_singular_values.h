// Singular values of many small matrices at once (issue 20): the probes' erank and Newton–Schulz
// spectra of every head, each frame. LAPACK's gesdd takes ~8 µs per 16×16 matrix, mostly set-up,
// and one inspect frame of demo-mqar needs 16 of them: more than half the probes' cost. Here
// one-sided Jacobi rotations (Hestenes) run on 16 matrices together, one per SIMD lane.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// Sides up to this go the Jacobi way; larger matrices go to at::linalg_svdvals.
inline constexpr int64_t kSmallSingularValueSide = 64;

// As at::linalg_svdvals for a CPU float32 stack [N, r, c]: [N, min(r, c)], descending. Matrices
// with a NaN or Inf give NaN singular values (LAPACK would fail); callers zero them first.
at::Tensor small_singular_values(const at::Tensor& matrices);

}  // namespace memscope::model
