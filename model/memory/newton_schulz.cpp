#include "model/memory/newton_schulz.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

// C[m,n] = beta·C0 + alpha·A[m,k]·B[k,n], row-major (A with any strides, below). C0 (read only
// where beta ≠ 0) is where the scaled sum comes from, so that B = b·A + c·A² and a·Y + Y·B need no
// copy of A or Y first: those copies were most of the 14–15% of Atlas's layer step that `perf` put
// in memmove. A block of R
// rows × S strips of C is accumulated in registers over the whole k loop, as axpys of B's rows
// (written through C instead, every step would wait on its own store). Eight accumulators: an
// FMA's result is ready four cycles later and a core with two FMA units needs eight independent
// chains to start one on each every cycle (with four, an Intel core ran this at half its peak).
// Each element's sum still runs over k in order, so the result does not depend on the blocking.
//
// A strip is GCC's generic vector of W floats, exactly one register of the set its kernel is built
// for: 16 in the AVX-512 kernel, 8 in the AVX2 + FMA one, 4 in the portable (SSE) one. A vector
// wider than the target's registers is split by the compiler through the stack: with 16-float
// strips in an AVX2 build (and no FMA, which target_clones("avx2") leaves out) Newton–Schulz on a
// 16×64 matrix ran at 5–6 GFLOP/s on the AMD VM, against 39 with these kernels (issue 20).
template <int W>
struct StripOf {
  typedef float type __attribute__((vector_size(W * sizeof(float))));
};

// Strips move by memcpy (unaligned loads and stores) and never cross a call: passed or returned,
// a vector's ABI would differ between the kernels (hence always_inline).
// A(i, p) is A[i·ai + p·ap]: A is read one element at a time (broadcast), so it may be stored
// transposed at no cost; B's rows are read W wide and must be contiguous.
template <int W, int R, int S>
[[gnu::always_inline]] inline void gemm_block(const float* A, int ai, int ap, const float* B, const float* C0,
                                              float* C, int i, int j0, int k, int n, float alpha,
                                              float beta) {
  using Strip = typename StripOf<W>::type;
  Strip acc[R][S] = {};
  for (int p = 0; p < k; ++p) {
    Strip b[S];
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) std::memcpy(&b[s], B + p * n + j0 + s * W, sizeof(Strip));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float a = A[(i + r) * ai + p * ap];
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) acc[r][s] += a * b[s];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      float* out = C + (i + r) * n + j0 + s * W;
      Strip c = alpha * acc[r][s];
      if (beta != 0.0f) {  // BLAS's convention: with beta = 0, C0 is not read (it may hold a NaN)
        Strip old;
        std::memcpy(&old, C0 + (i + r) * n + j0 + s * W, sizeof old);
        c = beta * old + c;
      }
      std::memcpy(out, &c, sizeof c);
    }
  }
}

// `symmetric`: C (square) comes out symmetric, as X Xᵀ and A·A for a symmetric A do. Then only
// the blocks that reach the diagonal or above it are computed, and the rest is mirrored: C[j][i]
// sums the same products in the same order as C[i][j]. A 64×64 Gram matrix skips 8 of 32 blocks
// (16-float strips).
template <int W>
[[gnu::always_inline]] inline void small_gemm_strips(const float* A, int ai, int ap, const float* B,
                                                     const float* C0, float* C, int m, int k, int n,
                                                     float alpha, float beta, bool symmetric) {
  // Rows [i, i+R) of columns [j0, j0+width) hold an element on or above the diagonal iff i < j0 + width.
  auto rows_end = [&](int j0, int width) { return symmetric ? std::min(m, j0 + width) : m; };
  int j0 = 0;
  for (; j0 + 2 * W <= n; j0 += 2 * W) {  // 4 rows × 2 strips
    const int end = rows_end(j0, 2 * W);
    int i = 0;
    for (; i + 4 <= m && i < end; i += 4) gemm_block<W, 4, 2>(A, ai, ap, B, C0, C, i, j0, k, n, alpha, beta);
    for (; i < end; ++i) gemm_block<W, 1, 2>(A, ai, ap, B, C0, C, i, j0, k, n, alpha, beta);
  }
  for (; j0 + W <= n; j0 += W) {  // 8 (or 4) rows × 1 strip
    const int end = rows_end(j0, W);
    int i = 0;
    for (; i + 8 <= m && i < end; i += 8) gemm_block<W, 8, 1>(A, ai, ap, B, C0, C, i, j0, k, n, alpha, beta);
    for (; i + 4 <= m && i < end; i += 4) gemm_block<W, 4, 1>(A, ai, ap, B, C0, C, i, j0, k, n, alpha, beta);
    for (; i < end; ++i) gemm_block<W, 1, 1>(A, ai, ap, B, C0, C, i, j0, k, n, alpha, beta);
  }
  for (int i = 0; i < m; ++i)  // the ragged columns of a side that is not a multiple of W
    for (int j = j0; j < n; ++j) {
      float sum = 0;
      for (int p = 0; p < k; ++p) sum += A[i * ai + p * ap] * B[p * n + j];
      C[i * n + j] = beta != 0.0f ? beta * C0[i * n + j] + alpha * sum : alpha * sum;
    }
  if (symmetric)
    for (int i = 1; i < m; ++i)
      for (int j = 0; j < i; ++j) C[i * n + j] = C[j * n + i];
}

using SmallGemm = void (*)(const float*, int, int, const float*, const float*, float*, int, int, int, float,
                           float, bool);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx512f")]] void small_gemm_avx512(const float* A, int ai, int ap, const float* B,
                                                  const float* C0, float* C, int m, int k, int n, float alpha,
                                                  float beta, bool symmetric) {
  small_gemm_strips<16>(A, ai, ap, B, C0, C, m, k, n, alpha, beta, symmetric);
}
[[gnu::target("avx2,fma")]] void small_gemm_avx2(const float* A, int ai, int ap, const float* B,
                                                 const float* C0, float* C, int m, int k, int n, float alpha,
                                                 float beta, bool symmetric) {
  small_gemm_strips<8>(A, ai, ap, B, C0, C, m, k, n, alpha, beta, symmetric);
}
#endif
void small_gemm_portable(const float* A, int ai, int ap, const float* B, const float* C0, float* C, int m,
                         int k, int n, float alpha, float beta, bool symmetric) {
  small_gemm_strips<4>(A, ai, ap, B, C0, C, m, k, n, alpha, beta, symmetric);
}

// The widest kernel this CPU runs, chosen once.
void small_gemm(const float* A, int ai, int ap, const float* B, const float* C0, float* C, int m, int k,
                int n, float alpha, float beta, bool symmetric = false) {
  static const SmallGemm kernel = [] {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f")) return &small_gemm_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &small_gemm_avx2;
#endif
    return &small_gemm_portable;
  }();
  kernel(A, ai, ap, B, C0, C, m, k, n, alpha, beta, symmetric);
}

// The largest matrices this path takes: a short side (the Gram matrix's) up to 64 and a long one up
// to 256, so that X and its Gram matrix stay in L2. Beyond them BLAS's blocking wins over the loop
// (AMD VM, one thread, 2026-11-27: this loop against ATen's form at 16×64 76 µs against 328, at
// 64×256 1.7 ms against 2.4; at 128×128 the two alike; at 256×256 9.4 ms against 6.2).
constexpr int64_t kSmallShortSide = 64, kSmallLongSide = 256;

}  // namespace

at::Tensor newton_schulz_small(const at::Tensor& g, const NsSchedule& schedule) {
  if (g.dim() < 2 || g.device().type() != at::kCPU || g.scalar_type() != at::kFloat || g.requires_grad() ||
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
