#include "model/memory/newton_schulz.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/util/simd_clones.h"

namespace memscope::model {

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
  for (int i = 0; i < schedule.iterations(); ++i) {
    const auto& [a, b, c] = schedule.at(i);
    const at::Tensor gram = at::bmm(x, x.transpose(-2, -1));
    const at::Tensor poly = at::baddbmm(gram, gram, gram, /*beta=*/b, /*alpha=*/c);
    x = at::baddbmm(x, poly, x, /*beta=*/a, /*alpha=*/1.0);
  }
  x = x.reshape(shape);
  if (transposed) x = x.transpose(-2, -1);
  return x.contiguous();
}

namespace {

// C[m,n] = beta·C + alpha·A[m,k]·B[k,n], row-major. Each 16-wide strip of a row of C is
// accumulated in a register over the whole k loop, as axpys of B's rows (written through C instead,
// every step would wait on its own store), four rows at a time for four independent FMA chains.
// Strip is GCC's generic vector: one AVX-512 register in the avx512f clone that target_clones
// builds, two AVX2 registers in the avx2 one, four SSE registers in the portable one.
typedef float Strip __attribute__((vector_size(64)));
constexpr int kStrip = 16;

MEMSCOPE_SIMD_CLONES
void small_gemm(const float* A, const float* B, float* C, int m, int k, int n, float alpha, float beta) {
  // Strips move by memcpy (unaligned loads and stores) and never cross a call: passed or returned,
  // a vector's ABI would differ between the clones.
  int j0 = 0;
  for (; j0 + kStrip <= n; j0 += kStrip) {
    int i = 0;
    for (; i + 4 <= m; i += 4) {
      Strip acc0 = {}, acc1 = {}, acc2 = {}, acc3 = {};
      for (int p = 0; p < k; ++p) {
        Strip b;
        std::memcpy(&b, B + p * n + j0, sizeof b);
        acc0 += A[(i + 0) * k + p] * b;
        acc1 += A[(i + 1) * k + p] * b;
        acc2 += A[(i + 2) * k + p] * b;
        acc3 += A[(i + 3) * k + p] * b;
      }
      const Strip* rows[4] = {&acc0, &acc1, &acc2, &acc3};
      for (int r = 0; r < 4; ++r) {
        Strip c;
        std::memcpy(&c, C + (i + r) * n + j0, sizeof c);
        c = beta * c + alpha * *rows[r];
        std::memcpy(C + (i + r) * n + j0, &c, sizeof c);
      }
    }
    for (; i < m; ++i) {
      Strip acc = {}, b, c;
      for (int p = 0; p < k; ++p) {
        std::memcpy(&b, B + p * n + j0, sizeof b);
        acc += A[i * k + p] * b;
      }
      std::memcpy(&c, C + i * n + j0, sizeof c);
      c = beta * c + alpha * acc;
      std::memcpy(C + i * n + j0, &c, sizeof c);
    }
  }
  for (int i = 0; i < m; ++i)  // the ragged columns of a side that is not a multiple of 16
    for (int j = j0; j < n; ++j) {
      float sum = 0;
      for (int p = 0; p < k; ++p) sum += A[i * k + p] * B[p * n + j];
      C[i * n + j] = beta * C[i * n + j] + alpha * sum;
    }
}

// Largest matrix side this path takes; beyond it BLAS's blocking wins over the loop.
constexpr int64_t kSmallSide = 64;

}  // namespace

at::Tensor newton_schulz_small(const at::Tensor& g, const NsSchedule& schedule) {
  if (g.dim() < 2 || g.device().type() != at::kCPU || g.scalar_type() != at::kFloat || g.requires_grad() ||
      std::max(g.size(-2), g.size(-1)) > kSmallSide)
    return newton_schulz(g, schedule);
  const bool transposed = g.size(-2) > g.size(-1);
  // Work on X with m ≤ n rows, so the Gram matrix A = X Xᵀ is the small m×m one.
  const at::Tensor x_in = (transposed ? g.transpose(-2, -1) : g).contiguous();
  const int m = static_cast<int>(x_in.size(-2)), n = static_cast<int>(x_in.size(-1));
  const int64_t count = m * n == 0 ? 0 : x_in.numel() / (m * n);
  at::Tensor out = at::empty_like(x_in);
  std::vector<float> x(static_cast<size_t>(m * n)), xt(static_cast<size_t>(n * m)), gram(static_cast<size_t>(m * m)),
      poly(static_cast<size_t>(m * m)), next(static_cast<size_t>(m * n));
  for (int64_t matrix = 0; matrix < count; ++matrix) {
    const float* source = x_in.data_ptr<float>() + matrix * m * n;
    float squares = 0;  // ‖G‖_F in float, as linalg_vector_norm computes it for float input
    for (int i = 0; i < m * n; ++i) squares += source[i] * source[i];
    const float inverse = 1.0f / (std::sqrt(squares) + 1e-7f);
    for (int i = 0; i < m * n; ++i) x[static_cast<size_t>(i)] = source[i] * inverse;
    for (int it = 0; it < schedule.iterations(); ++it) {
      const auto& [a, b, c] = schedule.at(it);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) xt[static_cast<size_t>(j * m + i)] = x[static_cast<size_t>(i * n + j)];
      std::fill(gram.begin(), gram.end(), 0.0f);
      small_gemm(x.data(), xt.data(), gram.data(), m, n, m, 1.0f, 0.0f);                         // A = X Xᵀ
      poly = gram;
      small_gemm(gram.data(), gram.data(), poly.data(), m, m, m, static_cast<float>(c), static_cast<float>(b));  // b·A + c·A²
      next = x;
      small_gemm(poly.data(), x.data(), next.data(), m, m, n, 1.0f, static_cast<float>(a));       // a·X + B·X
      x.swap(next);
    }
    std::copy(x.begin(), x.end(), out.data_ptr<float>() + matrix * m * n);
  }
  return transposed ? out.transpose(-2, -1).contiguous() : out;
}

}  // namespace memscope::model
