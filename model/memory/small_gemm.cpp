// small_gemm.h's kernel, one copy per instruction set (issue 20).
#include "model/memory/small_gemm.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace memscope::model {

namespace {

// A block of R rows × S strips of C is accumulated in registers over the whole k loop, as axpys
// of B's rows (written through C instead, every step would wait on its own store). Eight
// accumulators: an FMA's result is ready four cycles later and a core with two FMA units needs
// eight independent chains to start one on each every cycle (with four, an Intel core ran this at
// half its peak). Each element's sum still runs over k in order, so the result does not depend on
// the blocking.
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

// small_gemm_nt's kernel. Each element C[i,j] = ⟨A row i, B row j⟩ is summed a register wide over
// p, then across the register's lanes by a fixed tree, ((l0+l1)+(l2+l3))+…, then over the last
// k mod W terms in order: the same arithmetic for an element of a full block of W rows of B as for
// one of the ragged rows after them.
//
// A block is one row of A against W rows of B: W accumulators, each read of A's strip shared by W
// FMAs. The block's B rows (W·k floats) stay in L1 while every row of A passes them, so each of B's
// elements comes from memory once. The W accumulators' lane sums are one tree of shuffles: pairs of
// registers are folded into one, a lane block of 1, 2, 4, … at a time, until one register holds
// the W sums in order.
template <int W>
struct IndexOf {
  typedef int type __attribute__((vector_size(W * sizeof(int))));
};

// One fold of the lane-sum tree: lanes in blocks of b, taken alternately from x and y, plus the
// blocks beside them. Through pointers, so that no vector crosses a call.
template <int W, int B, size_t... L>
[[gnu::always_inline]] inline void fold(const typename StripOf<W>::type* x,
                                        const typename StripOf<W>::type* y, typename StripOf<W>::type* out,
                                        std::index_sequence<L...>) {
#if defined(__clang__)
  *out = __builtin_shufflevector(*x, *y, ((L / B) % 2 == 0 ? L : W + L - B)...) +
         __builtin_shufflevector(*x, *y, ((L / B) % 2 == 0 ? L + B : W + L)...);
#else
  const typename IndexOf<W>::type near{static_cast<int>((L / B) % 2 == 0 ? L : W + L - B)...};
  const typename IndexOf<W>::type beside{static_cast<int>((L / B) % 2 == 0 ? L + B : W + L)...};
  *out = __builtin_shuffle(*x, *y, near) + __builtin_shuffle(*x, *y, beside);
#endif
}

// v[0] ends as the W lane sums of v[0..W), in order.
template <int W, int B>
[[gnu::always_inline]] inline void fold_lanes(typename StripOf<W>::type* v) {
  if constexpr (B < W) {
#pragma GCC unroll 16
    for (int i = 0; i < W / (2 * B); ++i)
      fold<W, B>(&v[2 * i], &v[2 * i + 1], &v[i], std::make_index_sequence<W>{});
    fold_lanes<W, 2 * B>(v);
  }
}

// The same tree over one register's lanes, for the ragged rows of B.
template <int W>
[[gnu::always_inline]] inline float lane_sum(const typename StripOf<W>::type* v) {
  float lanes[W];
  std::memcpy(lanes, v, sizeof lanes);
  for (int width = 1; width < W; width *= 2)
    for (int l = 0; l < W; l += 2 * width) lanes[l] += lanes[l + width];
  return lanes[0];
}

template <int W>
[[gnu::always_inline]] inline void small_gemm_nt_strips(const float* A, int lda, const float* B, float* C,
                                                        int m, int k, int n) {
  using Strip = typename StripOf<W>::type;
  const int full = k - k % W;
  int j0 = 0;
  for (; j0 + W <= n; j0 += W)
    for (int i = 0; i < m; ++i) {
      const float* a = A + i * lda;
      Strip acc[W] = {};
      for (int p = 0; p < full; p += W) {
        Strip av;
        std::memcpy(&av, a + p, sizeof av);
#pragma GCC unroll 16
        for (int s = 0; s < W; ++s) {
          Strip bv;
          std::memcpy(&bv, B + (j0 + s) * k + p, sizeof bv);
          acc[s] += av * bv;
        }
      }
      fold_lanes<W, 1>(acc);
      float sums[W];
      std::memcpy(sums, &acc[0], sizeof sums);
      for (int s = 0; s < W; ++s)
        for (int p = full; p < k; ++p) sums[s] += a[p] * B[(j0 + s) * k + p];
      std::memcpy(C + i * n + j0, sums, sizeof sums);
    }
  for (int j = j0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const float* a = A + i * lda;
      Strip acc = {};
      for (int p = 0; p < full; p += W) {
        Strip av, bv;
        std::memcpy(&av, a + p, sizeof av);
        std::memcpy(&bv, B + j * k + p, sizeof bv);
        acc += av * bv;
      }
      float sum = lane_sum<W>(&acc);
      for (int p = full; p < k; ++p) sum += a[p] * B[j * k + p];
      C[i * n + j] = sum;
    }
}

using SmallGemmNt = void (*)(const float*, int, const float*, float*, int, int, int);

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
[[gnu::target("avx512f")]] void small_gemm_nt_avx512(const float* A, int lda, const float* B, float* C, int m,
                                                     int k, int n) {
  small_gemm_nt_strips<16>(A, lda, B, C, m, k, n);
}
[[gnu::target("avx2,fma")]] void small_gemm_nt_avx2(const float* A, int lda, const float* B, float* C, int m,
                                                    int k, int n) {
  small_gemm_nt_strips<8>(A, lda, B, C, m, k, n);
}
#endif
void small_gemm_portable(const float* A, int ai, int ap, const float* B, const float* C0, float* C, int m,
                         int k, int n, float alpha, float beta, bool symmetric) {
  small_gemm_strips<4>(A, ai, ap, B, C0, C, m, k, n, alpha, beta, symmetric);
}

}  // namespace

// The widest kernel this CPU runs, chosen once.
void small_gemm(const float* A, int ai, int ap, const float* B, const float* C0, float* C, int m, int k,
                int n, float alpha, float beta, bool symmetric) {
  static const SmallGemm kernel = [] {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f")) return &small_gemm_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &small_gemm_avx2;
#endif
    return &small_gemm_portable;
  }();
  kernel(A, ai, ap, B, C0, C, m, k, n, alpha, beta, symmetric);
}

void small_gemm_nt_generic(int width, const float* A, int lda, const float* B, float* C, int m, int k,
                           int n) {
  switch (width) {
    case 4:
      small_gemm_nt_strips<4>(A, lda, B, C, m, k, n);
      return;
    case 8:
      small_gemm_nt_strips<8>(A, lda, B, C, m, k, n);
      return;
    case 16:
      small_gemm_nt_strips<16>(A, lda, B, C, m, k, n);
      return;
    default:
      throw std::invalid_argument("small_gemm_nt_generic: width " + std::to_string(width));
  }
}

void small_gemm_nt(const float* A, int lda, const float* B, float* C, int m, int k, int n) {
  static const SmallGemmNt kernel = [] {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f")) return &small_gemm_nt_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &small_gemm_nt_avx2;
#endif
    return +[](const float* A, int lda, const float* B, float* C, int m, int k, int n) {
      small_gemm_nt_strips<4>(A, lda, B, C, m, k, n);
    };
  }();
  kernel(A, lda, B, C, m, k, n);
}

}  // namespace memscope::model
