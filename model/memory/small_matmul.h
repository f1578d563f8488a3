// x @ y for stacks of tiny matrices. The chunkwise form multiplies a different matrix per token
// (per-token memories, per-token outer products); LibTorch's CPU bmm then loops over thousands of
// 1-row or rank-1 GEMMs, ~10 µs each. A broadcast multiply and sum does the same arithmetic in one
// vectorised pass, so small matrix–vector products and outer products take that route; stacks of
// small matrices, and those products where batched_matmul.h's loop applies and a matrix is large,
// take the loop.
#pragma once
#include <ATen/ATen.h>

#include <algorithm>

#include "model/memory/batched_matmul.h"

namespace memscope::model {

// From a matrix this large, the broadcast route's weight-sized temporaries (the multiply's, and its
// backward's product and sum) cost more than the loop's call: the CMS's one-token reads and writes
// of a [64,256] weight went through them, a tenth of HOPE's training step.
constexpr int64_t kLoopFromElements = 1024;

// x [...,m,k] @ y [...,k,n] with broadcasting, as at::matmul.
inline at::Tensor small_matmul(const at::Tensor& x, const at::Tensor& y) {
  if (x.dim() >= 3 && y.dim() >= 3) {
    const int64_t m = x.size(-2), k = x.size(-1), n = y.size(-1);
    if (std::max({m * k, k * n, m * n}) >= kLoopFromElements && batched_matmul_applies(x, y))
      return batched_matmul(x, y);
    if (x.size(-1) == 1) return x * y;                                             // rank 1: [m,1]·[1,n]
    if (x.size(-2) == 1) return (x.transpose(-1, -2) * y).sum(-2, /*keepdim=*/true);  // row × matrix
    if (y.size(-1) == 1) return (x * y.transpose(-1, -2)).sum(-1, /*keepdim=*/true);  // matrix × column
  }
  return batched_matmul(x, y);
}

}  // namespace memscope::model
