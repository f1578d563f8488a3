// x @ y for stacks of small float32 matrices on the CPU, differentiable, in one call.
//
// The chunkwise MLP memory multiplies one small matrix per head and sequence: a [n,d]×[d,4d] read
// of each of B·H memories. LibTorch's CPU bmm hands every matrix of such a stack to BLAS on its
// own, behind three `select` views (at the d = 16 of the demo models, ~2.7 µs a matrix, 175 µs for
// a stack of 64; half of an eager-PyTorch MLP-memory training step, and of ours). This runs the
// whole stack through small_gemm.h's register-blocked loop instead, with a backward made of the
// same products, so a double backward (create_graph) goes through it too.
//
// It takes over where cpu_kernels_on(), float32, no CPU autocast, both operands at least 3-D and
// every matrix side at most kBatchedMatmulMaxSide, unless MEMSCOPE_BATCHED_MATMUL=0; anywhere else
// it is at::matmul. Broadcasting
// follows at::matmul's. Each element's sum runs over k in order (small_gemm), or, for a transposed
// y against fewer than 16 rows, a register wide and then across its lanes by a fixed tree
// (small_gemm_nt); either way one thread computes each matrix, so the result does not depend on
// the thread count. It differs from BLAS's in the last bits.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace memscope::model {

// Larger matrices go to BLAS, whose packing then pays (small_gemm.h: at BLAS's peak up to 64×64).
constexpr int64_t kBatchedMatmulMaxSide = 256;

// x [...,m,k] @ y [...,k,n], the batch dims broadcast, as at::matmul.
at::Tensor batched_matmul(const at::Tensor& x, const at::Tensor& y);

// Whether batched_matmul takes its own loop for these operands (for the tests).
bool batched_matmul_applies(const at::Tensor& x, const at::Tensor& y);

}  // namespace memscope::model
