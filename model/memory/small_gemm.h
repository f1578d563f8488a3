// C = β·C0 + α·A·B for the small float32 matrices of the memory's inner loops, on the CPU
// (issue 20): Newton–Schulz's Gram matrices and products (newton_schulz.cpp), the MLP memory's
// fused chunkwise form (fused_mlp_chunkwise.cpp), the stacks of batched_matmul.h and the chunk-end
// updates of state_update.h; and C = A·Bᵀ with B read in place (small_gemm_nt, below). At these
// sizes (sides of 16 to 256) a BLAS call spends more on packing and dispatch than on the product;
// this loop packs nothing and keeps a block of C in registers, one register-wide strip per
// instruction set (AVX-512, AVX2 + FMA, SSE), chosen once at run time. On the AMD VM (AVX2, one
// thread): 39 GFLOP/s on 16×64 matrices, 86 on 64×64 (its peak sgemm there, BLAS on large
// matrices, is 73–91).
#pragma once
#include <climits>
#include <cstdint>

namespace memscope::model {

// Whether an index or stride fits small_gemm's int arithmetic.
inline bool fits_gemm_index(int64_t v) { return v >= 0 && v <= INT_MAX; }

// C[m,n] = beta·C0 + alpha·A[m,k]·B[k,n], all float32 and C row-major with rows n apart.
// - A(i, p) is A[i·ai + p·ap], so A may be stored transposed at no cost (ai = 1, ap = its rows).
// - B is row-major with rows n apart, its rows read a register wide.
// - C0 is read only where beta ≠ 0 (BLAS's convention: with beta = 0 it may hold a NaN); it may be
//   C itself, so that C += A·B needs no copy. C must not overlap A or B.
// - symmetric: C (square) comes out symmetric, as X Xᵀ and A·A for a symmetric A do; only the
//   blocks on or above the diagonal are computed and the rest mirrored.
// Every element's sum runs over p in order, whichever kernel runs.
void small_gemm(const float* A, int ai, int ap, const float* B, const float* C0, float* C, int m, int k,
                int n, float alpha, float beta, bool symmetric = false);

// C[m,n] = A[m,k]·Bᵀ for B [n,k] row-major: a product with a transposed weight Wᵀ, read in place.
// - A(i, p) is A[i·lda + p]: its rows contiguous.
// - C is row-major with rows n apart, and must not overlap A or B.
// Each element is a dot product of two contiguous rows, summed a register wide and then across the
// register's lanes by a fixed tree: the same bits at any blocking or thread count, though rounded
// otherwise than small_gemm's sum in order. Against a transposing copy of B and small_gemm, on the
// AMD VM (80 matrices, B [256,64]): 0.10 ms against 0.58 for one row of A, 0.30 against 0.59 for four.
void small_gemm_nt(const float* A, int lda, const float* B, float* C, int m, int k, int n);

// The same arithmetic in strips of `width` floats (4, 8 or 16), built for the baseline instruction
// set, where a wider strip is split into the registers there are: for the tests, which check every
// width's lane-sum tree on any CPU (this one has no AVX-512).
void small_gemm_nt_generic(int width, const float* A, int lda, const float* B, float* C, int m, int k, int n);

}  // namespace memscope::model
