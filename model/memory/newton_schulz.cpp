#include "model/memory/newton_schulz.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/memory/batched_matmul.h"
#include "model/memory/small_gemm.h"
#include "model/util/cpu_kernels.h"

namespace memscope::model {

namespace {

// The largest matrices the loops take (newton_schulz_small's, and newton_schulz's products through
// batched_matmul): a short side (the Gram matrix's) up to 64 and a long one up to 256, so that X and
// its Gram matrix stay in L2. Beyond them BLAS's blocking wins over the loop
// (AMD VM, one thread, 2026-11-27: this loop against ATen's form at 16×64 76 µs against 328, at
// 64×256 1.7 ms against 2.4; at 128×128 the two alike; at 256×256 9.4 ms against 6.2).
constexpr int64_t kSmallShortSide = 64, kSmallLongSide = 256;

}  // namespace

at::Tensor newton_schulz(const at::Tensor& g, const NsSchedule& schedule) {
  TORCH_CHECK(g.dim() >= 2, "newton_schulz: expected a matrix or a batch of matrices, got ",
              g.sizes());
  // SPEC §6: X = G / (‖G‖_F + 1e-7), per matrix of the batch.
  auto norm = at::linalg_vector_norm(g, 2, {-2, -1}, /*keepdim=*/true);
  at::Tensor x = g / (norm + 1e-7);
  const bool transposed = g.size(-2) > g.size(-1);
  if (transposed) x = x.transpose(-2, -1);
  // One iteration is three products, each with its scaled sum fused into the GEMM (β·C + α·A·B):
  // B = b·A + c·A², X = a·X + B·X. Batched over every leading dimension as [N,m,m] matrices.
  const auto shape = x.sizes().vec();
  x = x.reshape({-1, x.size(-2), x.size(-1)});
  // Small float32 matrices on the CPU (training's route, which newton_schulz_small's loop, having no
  // backward, leaves to this form) take batched_matmul.h's products and backward. LibTorch 1.13's
  // CPU bmm hands each matrix to BLAS on its own behind select views, forward and backward: 430k
  // selects in one training step of demo-mqar-atlas-mlp, and most of its time. Within the loop's
  // sizes below: on larger matrices BLAS's blocking wins.
  const bool loop = batched_matmul_applies(x, x.transpose(-2, -1)) && x.size(-2) <= kSmallShortSide &&
                    x.size(-1) <= kSmallLongSide;
  for (int i = 0; i < schedule.iterations(); ++i) {
    const auto& [a, b, c] = schedule.at(i);
    if (loop) {
      const at::Tensor gram = batched_matmul(x, x.transpose(-2, -1));
      const at::Tensor poly = b * gram + c * batched_matmul(gram, gram);
      x = a * x + batched_matmul(poly, x);
      continue;
    }
    const at::Tensor gram = at::bmm(x, x.transpose(-2, -1));
    const at::Tensor poly = at::baddbmm(gram, gram, gram, /*beta=*/b, /*alpha=*/c);
    x = at::baddbmm(x, poly, x, /*beta=*/a, /*alpha=*/1.0);
  }
  x = x.reshape(shape);
  if (transposed) x = x.transpose(-2, -1);
  return x.contiguous();
}

at::Tensor newton_schulz_small(const at::Tensor& g, const NsSchedule& schedule) {
  if (g.dim() < 2 || !cpu_kernels_on(g.device()) || g.scalar_type() != at::kFloat || g.requires_grad() ||
      std::min(g.size(-2), g.size(-1)) > kSmallShortSide || std::max(g.size(-2), g.size(-1)) > kSmallLongSide)
    return newton_schulz(g, schedule);
  const bool transposed = g.size(-2) > g.size(-1);
  // §6 works on X with m ≤ n rows, so that the Gram matrix A = X Xᵀ is the small m×m one. This
  // loop keeps Y = Xᵀ (n×m) instead: A = YᵀY and Y ← a·Y + Y·B (B is symmetric) then read Y's rows
  // 16 wide and its columns one element at a time, as small_gemm wants, and X never needs
  // transposing between iterations. Every sum runs over the same products in the same order as
  // on X.
  const at::Tensor y_in = (transposed ? g : g.transpose(-2, -1)).contiguous();
  const int n = static_cast<int>(y_in.size(-2)), m = static_cast<int>(y_in.size(-1));
  const int64_t count = m * n == 0 ? 0 : y_in.numel() / (m * n);
  at::Tensor out = at::empty_like(y_in);
  std::vector<float> y(static_cast<size_t>(n * m)), gram(static_cast<size_t>(m * m)), poly(static_cast<size_t>(m * m)),
      next(static_cast<size_t>(n * m));
  for (int64_t matrix = 0; matrix < count; ++matrix) {
    const float* source = y_in.data_ptr<float>() + matrix * m * n;
    // ‖G‖_F in float, summed in X's row order as linalg_vector_norm does for float input.
    float squares = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) squares += source[j * m + i] * source[j * m + i];
    const float inverse = 1.0f / (std::sqrt(squares) + 1e-7f);
    for (int i = 0; i < m * n; ++i) y[static_cast<size_t>(i)] = source[i] * inverse;
    for (int it = 0; it < schedule.iterations(); ++it) {
      const auto& [a, b, c] = schedule.at(it);
      // A = X Xᵀ = YᵀY: A(i, p) of the product is Y[p][i].
      small_gemm(y.data(), 1, m, y.data(), nullptr, gram.data(), m, n, m, 1.0f, 0.0f, /*symmetric=*/true);
      small_gemm(gram.data(), m, 1, gram.data(), gram.data(), poly.data(), m, m, m, static_cast<float>(c),
                 static_cast<float>(b), /*symmetric=*/true);  // B = b·A + c·A²
      small_gemm(y.data(), m, 1, poly.data(), y.data(), next.data(), n, m, m, 1.0f,
                 static_cast<float>(a));  // Y·B + a·Y
      y.swap(next);
    }
    std::copy(y.begin(), y.end(), out.data_ptr<float>() + matrix * m * n);
  }
  return transposed ? out : out.transpose(-2, -1).contiguous();
}

}  // namespace memscope::model
