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

#include <cstdint>
#include <utility>
#include <vector>

namespace memscope::model {

// Matrices whose shorter side is up to this go the batched way, whatever the longer side (the
// Gram matrix is of the shorter side: HOPE's 64×256 self-modifying weights, whose snapshot spectra
// took 8 ms a stack of ten through LAPACK); both sides longer go to at::linalg_svdvals.
inline constexpr int64_t kSmallSingularValueSide = 64;

// As at::linalg_svdvals for a CPU float32 stack [N, r, c]: [N, min(r, c)], descending. Matrices
// with a NaN or Inf give NaN singular values (LAPACK would fail); callers zero them first.
at::Tensor small_singular_values(const at::Tensor& matrices);

// Matrices whose shorter side is at least this share their groups with a thread waiting for this
// one (model/util/work_share.h); smaller ones take too little time a group for it to pay.
inline constexpr int64_t kSharedSingularValueSide = 32;

// How small_singular_values takes `count` matrices: groups {first, size} of 16 while more than 8 are
// left, then the last 8 or fewer (a padded lane costs as much as a real one).
std::vector<std::pair<int64_t, int64_t>> singular_value_groups(int64_t count);

// A float32 matrix on the host, row-major and contiguous: rows × cols floats from `data`.
struct HostMatrix {
  const float* data;
  int64_t rows, cols;
};

// What a matrix with a NaN or Inf entry gives: NaN singular values, or those of its copy with NaN
// and Inf read as 0.
enum class NonFinite { Nan, ReadAsZero };

// The same computation on matrices where they lie, with no stack made of them: they must share
// their shorter side k (at most kSmallSingularValueSide) and their longer side, each wide or tall
// (σ(Xᵀ) = σ(X)). Matrix i's singular values, descending, go to out[i·k, (i+1)·k). For a HOPE
// snapshot frame's 40 matrices of 64×256 and 256×64, making that stack (the tall ones transposed)
// took 0.4–0.7 ms of the frame's 4.2–4.7 (bench/probe_breakdown, Intel VM). The bits are the
// stack's: a tall matrix's columns are read in the order its transposed copy's rows were.
void small_singular_values_into(const std::vector<HostMatrix>& matrices, NonFinite non_finite, float* out);

}  // namespace memscope::model
