// A stack of memory matrices as a snapshot frame shows them (SPEC §8, MatrixSnapshot): the copy
// the heatmap draws, area-averaged so that its larger side is at most `largest`, and, when that
// copy is shrunk, what it no longer carries: the full matrices' singular values and their finite
// range and NaN/Inf counts.
//
// Why its own pass: a HOPE snapshot frame shows 40 matrices of 64×256, and as ATen calls the
// copies, the NaN/Inf masks, the ranges and the pooling took about 7 ms of its 12.5 ms, more than
// the spectra (Intel VM, 2026-12-05, bench/probe_breakdown --op-times). On the CPU in float32 it
// is one read of each matrix for the range, one for the pooling, and the batched spectra
// (small_singular_values.h); elsewhere the same values from ATen calls.
#pragma once
#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

namespace memscope::model {

struct ShownMatrices {
  at::Tensor shown;  // [N, r', c'] float32: the area means (the full matrices when none is shrunk)
  // [N, min(r, c) + 4] float32 when shrunk: σ descending (of the matrices with NaN and Inf read as
  // 0), then the finite entries' min and max and the NaN and Inf counts. Undefined when not shrunk.
  at::Tensor summary;
};

// `full` [N, r, c]; `largest` ≤ 0 keeps the full size. `known` [N, min(r, c)]: singular values
// the caller already has (the erank SVD's), used instead of computing them.
ShownMatrices show_matrices(const at::Tensor& full, int64_t largest, const at::Tensor& known = {});

// A matrix of a snapshot on the host, float32, row-major and contiguous, rows × cols: `now` itself
// (M), or now − before (ΔM) where `before` is set.
struct HostSnapshotMatrix {
  const float* now;
  const float* before;  // null: the matrix is `now`
  int64_t rows, cols;
};

// show_matrices' CPU pass for host matrices that share their shorter side (at most
// kSmallSingularValueSide) and their longer side (wide and tall mixed) and that `largest` shrinks:
// matrix i's area means go to shown[i] (its shown_shape's floats) and its summary to summary[i]
// (min(r, c) + 4 floats), the same bits as show_matrices and singular_values_together give for
// stacks of them. It goes by small_singular_values' groups, each group's ΔM made, measured and its
// spectra taken while it is in the cache, and shares the groups with a thread waiting for this one
// (model/util/work_share.h) where small_singular_values would.
// Why: made as stacks first, a HOPE snapshot frame's 40 matrices of 64×256 (2.6 MB, beyond this
// machine's 2 MB L2) were read from memory about six times over (ΔM, the stacks, the finite check,
// the Gram matrices' copies, the ranges, the pooling).
void show_host_matrices(const std::vector<HostSnapshotMatrix>& matrices, int64_t largest,
                        const std::vector<float*>& shown, const std::vector<float*>& summary);

// The singular values of several stacks [N_i, r_i, c_i] (NaN and Inf read as 0), [N_i, min(r_i,
// c_i)] each: in one batched call, on the matrices where they lie, when every matrix has the same
// shorter side (at most kSmallSingularValueSide) and longer side (a tall one is read by columns:
// σ(Xᵀ) = σ(X)); otherwise a call a stack (LAPACK's beyond that side). HOPE's snapshot stacks where
// they are not measured in place (selfmod_snapshot.h), W1 [64, 256] and W2 [256, 64], M and ΔM of
// ten memories each, so fill groups of 16 + 16 + 8 lanes (small_singular_values.h), where one call
// a stack took four groups of 16, each with six lanes of padding.
std::vector<at::Tensor> singular_values_together(const std::vector<at::Tensor>& stacks);

// The shown copy's shape for an r×c matrix: the larger side `largest`, the aspect kept (each side
// at least 1); r×c itself when `largest` ≤ 0 or the matrix already fits.
std::pair<int64_t, int64_t> shown_shape(int64_t rows, int64_t cols, int64_t largest);

// M, S or ΔM [..., a, b] area-averaged to shown_shape by at::adaptive_avg_pool2d (any device).
// show_matrices' CPU pass takes the same windows but sums in another order: the two may differ in
// the last bit.
at::Tensor downsample_matrix(const at::Tensor& m, int64_t largest);

}  // namespace memscope::model
