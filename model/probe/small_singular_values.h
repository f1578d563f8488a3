// Singular values of many small matrices at once (issue 20): the probes' erank and Newton–Schulz
// spectra of every head, each frame. LAPACK's gesdd takes ~8 µs per 16×16 matrix, mostly set-up,
// and one inspect frame of demo-mqar needs 16 of them: more than half the probes' cost. Here 16
// matrices (8 for a small stack) go together, one per SIMD lane: each one's Gram matrix in double, reduced to
// tridiagonal form by Householder reflections, whose eigenvalues λ = σ² the implicit QL algorithm finds. This
// replaced one-sided Jacobi in float (sixth session): 43 against 63 µs a demo-mqar frame, 2–3×
// faster at sides 32 and 64, and the error falls from ~1e-6 to ~3e-8 of σ_max.
//
// Called on a SideThread's job, the groups of matrices with a side of 32 or more are shared with
// the thread waiting for the job (model/util/work_share.h); each group is computed whole by one
// thread, so the bits do not depend on which. Each thread keeps its scratch between calls: about
// 640 KB at 64×256 (a padded matrix in double, and 16 lanes of a 64×64 Gram matrix).
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// Matrices whose shorter side is up to this go the batched way, whatever the longer side (the
// Gram matrix is of the shorter side: HOPE's 64×256 self-modifying weights, whose snapshot spectra
// took 8 ms a stack of ten through LAPACK); both sides longer go to at::linalg_svdvals.
inline constexpr int64_t kSmallSingularValueSide = 64;

// As at::linalg_svdvals for a CPU float32 stack [N, r, c]: [N, min(r, c)], descending. Matrices
// with a NaN or Inf give NaN singular values (LAPACK would fail); callers zero them first.
at::Tensor small_singular_values(const at::Tensor& matrices);

}  // namespace memscope::model
