#include "model/probe/small_singular_values.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "model/probe/finite_copy.h"
#include "model/util/simd_clones.h"
#include "model/util/work_share.h"

namespace memscope::model {

namespace {

// Matrices per group (`Lanes` below): 16, or 8 for a stack of 8 or fewer, or the last 8 or fewer of a
// larger one. A padded lane costs as much as a real one: Titans' 8 heads of 16×16 take 38 µs in a
// group of 8 against 58 in a group of 16 (AVX2 VM; not half, since a QL row's square root and
// division form a latency chain that fewer registers hide less well). Each loop over `lane` in the
// reduction and the QL sweep is one or two AVX-512 instructions of doubles, or two or four AVX2
// ones; the Gram matrices go by four lanes (gram_block), or a matrix at a time (gram_into_lane).
constexpr int kWideGroup = 16, kNarrowGroup = 8;
constexpr int kMaxSweepsPerEigenvalue = 30;

// Lane masks are 64 bits wide, all ones or all zeros, so that a mask and a double share a vector
// lane. `blend` selects with bit operations: written as `?:`, GCC moves the arithmetic of the chosen
// side into a branch (PRE), and without AVX-512's masked instructions the loop is then not
// vectorised at all (issue 20: the QL sweep ran scalar on AVX2; 16 matrices 16×16 took 111 µs, now 58).
using LaneMask = int64_t;

[[gnu::always_inline]] inline LaneMask mask_of(bool condition) { return -static_cast<LaneMask>(condition); }

// `when` where the mask is set, `otherwise` where it is clear.
[[gnu::always_inline]] inline double blend(LaneMask mask, double when, double otherwise) {
  uint64_t a, b;
  std::memcpy(&a, &when, sizeof a);
  std::memcpy(&b, &otherwise, sizeof b);
  const uint64_t bits = (a & static_cast<uint64_t>(mask)) | (b & ~static_cast<uint64_t>(mask));
  double out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// Entry (i, j) of the trailing block, reflected: G − v wᵀ − w vᵀ. Inlined into each clone, as the
// helpers below, so that it is built for the clone's width (a lambda was not vectorised at 8 lanes).
template <int Lanes>
[[gnu::always_inline]] inline void reflect_entry(double* __restrict gij, const double* __restrict v,
                                                 const double* __restrict w, int i, int j) {
  for (int lane = 0; lane < Lanes; ++lane)
    gij[lane] -= v[i * Lanes + lane] * w[j * Lanes + lane] + w[i * Lanes + lane] * v[j * Lanes + lane];
}

// Row i's part of p = G u over the block from `from` on (G's lower triangle: entry (i, j < i) adds
// to p_i and, as (j, i), to p_j). With Reflect, the row's entries are first reflected by the last
// reflection (v, w), stored, and multiplied as they are in registers: its diagonal first, as the
// product takes it. (Reflected in memory first and then read, GCC left the 8-lane copy scalar.)
template <int Lanes, bool Reflect>
[[gnu::always_inline]] inline void multiply_row(double* __restrict g, int m, int i, int from,
                                                const double* __restrict v, const double* __restrict w,
                                                const double* __restrict u, double* __restrict p) {
  double* __restrict row = g + i * m * Lanes;
  double sum[Lanes];
  for (int lane = 0; lane < Lanes; ++lane) {
    double gii = row[i * Lanes + lane];
    if (Reflect) {
      gii -= v[i * Lanes + lane] * w[i * Lanes + lane] + w[i * Lanes + lane] * v[i * Lanes + lane];
      row[i * Lanes + lane] = gii;
    }
    sum[lane] = gii * u[i * Lanes + lane];
  }
  for (int j = from; j < i; ++j)
    for (int lane = 0; lane < Lanes; ++lane) {
      double gij = row[j * Lanes + lane];
      if (Reflect) {
        gij -= v[i * Lanes + lane] * w[j * Lanes + lane] + w[i * Lanes + lane] * v[j * Lanes + lane];
        row[j * Lanes + lane] = gij;
      }
      sum[lane] += gij * u[j * Lanes + lane];
      p[j * Lanes + lane] += gij * u[i * Lanes + lane];
    }
  for (int lane = 0; lane < Lanes; ++lane) p[i * Lanes + lane] += sum[lane];
}

// Reflection k from column k below the diagonal, x: H x = α e₁ with α = −sign(x₀)‖x‖ (no
// cancellation in x₀ − α). Its vector into v, τ into tau; d[k] and e[k] are final.
template <int Lanes>
[[gnu::always_inline]] inline void reflection(const double* __restrict g, int m, int k, double* __restrict v,
                                              double* __restrict tau, double* __restrict d,
                                              double* __restrict e) {
  auto at = [&](int i, int j) { return g + (i * m + j) * Lanes; };
  double tail[Lanes] = {};
  for (int i = k + 2; i < m; ++i)
    for (int lane = 0; lane < Lanes; ++lane) tail[lane] += at(i, k)[lane] * at(i, k)[lane];
  for (int lane = 0; lane < Lanes; ++lane) {
    const double x0 = at(k + 1, k)[lane];
    const double alpha = -std::copysign(std::sqrt(x0 * x0 + tail[lane]), x0);
    const LaneMask reflects = mask_of(tail[lane] > 0);
    const double v0 = x0 - alpha;
    v[(k + 1) * Lanes + lane] = v0;
    tau[lane] = blend(reflects, 2.0 / (v0 * v0 + tail[lane]), 0.0);
    e[k * Lanes + lane] = blend(reflects, alpha, x0);
    d[k * Lanes + lane] = at(k, k)[lane];
  }
  for (int i = k + 2; i < m; ++i)
    for (int lane = 0; lane < Lanes; ++lane) v[i * Lanes + lane] = at(i, k)[lane];
}

// p = G u, summed over the block from `from` on, becomes p ← τ p, then w = p − (τ uᵀp / 2) u, in
// place.
template <int Lanes>
[[gnu::always_inline]] inline void finish_w(int m, int from, const double* __restrict tau,
                                            const double* __restrict u, double* __restrict p) {
  double k_half[Lanes] = {};
  for (int i = from; i < m; ++i)
    for (int lane = 0; lane < Lanes; ++lane) {
      p[i * Lanes + lane] *= tau[lane];
      k_half[lane] += u[i * Lanes + lane] * p[i * Lanes + lane];
    }
  for (int lane = 0; lane < Lanes; ++lane) k_half[lane] *= 0.5 * tau[lane];
  for (int i = from; i < m; ++i)
    for (int lane = 0; lane < Lanes; ++lane) p[i * Lanes + lane] -= k_half[lane] * u[i * Lanes + lane];
}

// One group of up to Lanes symmetric m×m matrices, lane-interleaved: g[(i·m + j)·Lanes + lane], of
// which only the lower triangle (j ≤ i) is read or written. Householder reflections reduce each to
// tridiagonal form, in place: the diagonal goes to d[i·Lanes + lane] and the off-diagonal
// (coupling i and i+1) to e[i·Lanes + lane]; e's last row is zeroed. A column whose part below the
// subdiagonal is already zero gets no reflection (τ = 0).
// Why the lower triangle alone: the group's matrices are m²·Lanes doubles (512 KB for HOPE's 64×64
// Gram matrices in 16 lanes), beyond L1, and every reflection streams the trailing block from L2:
// the whole matrix took twice the traffic for the same arithmetic, two stacks of ten of HOPE's
// 64×256 matrices 2.7 → 2.4 ms (Intel VM, bench/probe_breakdown spectra_us).
// Why one pass a reflection: reflection k updates the trailing block (G − v wᵀ − w vᵀ) and
// reflection k + 1 then multiplies it by its vector (G v'). Once column k + 1 is updated, v' is
// known, so each entry is updated and multiplied in the same visit: the block is streamed once a
// reflection, not twice. The operations and their order are the two passes', so for finite input
// the bits are too (checked for m up to 130, at 8 and 16 lanes; a NaN's sign may differ).
template <int Lanes>
MEMSCOPE_SIMD_CLONES
void tridiagonalise(double* __restrict g, double* __restrict d, double* __restrict e, int m) {
  // This reflection's vector and w, and the next one's.
  std::vector<double> v(static_cast<size_t>(m * Lanes)), w(v.size()), v_next(v.size()), w_next(v.size());
  double tau[Lanes];
  if (m >= 3) {
    reflection<Lanes>(g, m, 0, v.data(), tau, d, e);
    std::fill(w.begin() + Lanes, w.end(), 0.0);
    for (int i = 1; i < m; ++i) multiply_row<Lanes, false>(g, m, i, 1, nullptr, nullptr, v.data(), w.data());
    finish_w<Lanes>(m, 1, tau, v.data(), w.data());
  }
  for (int k = 0; k + 2 < m; ++k) {
    // H G H = G − v wᵀ − w vᵀ on the trailing block (rows and columns from k + 1).
    if (k + 3 >= m) {  // the last reflection: the update alone
      for (int i = k + 1; i < m; ++i)
        for (int j = k + 1; j <= i; ++j)
          reflect_entry<Lanes>(g + (i * m + j) * Lanes, v.data(), w.data(), i, j);
      break;
    }
    // Column k + 1 first, its diagonal included: the next reflection comes from it. Then the rest
    // of the block, each entry reflected and multiplied by the next reflection's vector at once.
    for (int i = k + 1; i < m; ++i)
      reflect_entry<Lanes>(g + (i * m + k + 1) * Lanes, v.data(), w.data(), i, k + 1);
    reflection<Lanes>(g, m, k + 1, v_next.data(), tau, d, e);
    std::fill(w_next.begin() + (k + 2) * Lanes, w_next.end(), 0.0);
    for (int i = k + 2; i < m; ++i)
      multiply_row<Lanes, true>(g, m, i, k + 2, v.data(), w.data(), v_next.data(), w_next.data());
    finish_w<Lanes>(m, k + 2, tau, v_next.data(), w_next.data());
    std::swap(v, v_next);
    std::swap(w, w_next);
  }
  for (int lane = 0; lane < Lanes; ++lane) {
    if (m >= 2) {
      d[(m - 2) * Lanes + lane] = g[((m - 2) * m + m - 2) * Lanes + lane];
      e[(m - 2) * Lanes + lane] = g[((m - 1) * m + m - 2) * Lanes + lane];
    }
    d[(m - 1) * Lanes + lane] = g[((m - 1) * m + m - 1) * Lanes + lane];
    e[(m - 1) * Lanes + lane] = 0;
  }
}

// One row (i) of a root-free QL sweep in every lane still rotating below its split point: the
// Pal–Walker–Kahan form (LAPACK's dsterf) on the squared off-diagonals e², with two divisions a row
// and no square root. The square-root form it replaced (a sqrt and a division a row, the two on one
// dependency chain, both on the one divider) took nearly half of a call for 16 matrices 16×64:
// 33–35 µs, now 28 (perf samples, AMD VM).
// Branch-free so that it vectorises: a lane that does not rotate keeps its values through the
// blends. Inlined into each of ql_eigenvalues' clones, so that it is built for the clone's width.
template <int Lanes>
[[gnu::always_inline]] inline void rotate_row(double* __restrict di, double* __restrict di1,
                                              const double* __restrict e2i, double* __restrict e2i1, int i,
                                              const int64_t* __restrict split,
                                              const LaneMask* __restrict live, const double* __restrict shift,
                                              double* __restrict s, double* __restrict c,
                                              double* __restrict gamma, double* __restrict p) {
  for (int lane = 0; lane < Lanes; ++lane) {
    const LaneMask rotate = live[lane] & mask_of(i < split[lane]);
    const LaneMask first = mask_of(i + 1 == split[lane]);  // the sweep's first row: no e² below it yet
    // r = p + e_i² > 0 in a rotating lane: an e_i² of 0 would have split the matrix there.
    const double bb = e2i[lane], r = p[lane] + bb;
    const double inv = 1.0 / blend(rotate, r, 1.0);
    e2i1[lane] = blend(rotate & ~first, s[lane] * r, e2i1[lane]);
    const double cn = p[lane] * inv, sn = bb * inv;
    const double gn = cn * (di[lane] - shift[lane]) - sn * gamma[lane];
    const double pn = blend(mask_of(cn != 0.0), gn * gn / cn, c[lane] * bb);
    di1[lane] = blend(rotate, gamma[lane] + (di[lane] - gn), di1[lane]);
    c[lane] = blend(rotate, cn, c[lane]);
    s[lane] = blend(rotate, sn, s[lane]);
    gamma[lane] = blend(rotate, gn, gamma[lane]);
    p[lane] = blend(rotate, pn, p[lane]);
  }
}

// The eigenvalues of Lanes symmetric tridiagonal matrices (d and the squared off-diagonals e2), in
// place in d, by the implicit QL algorithm with Wilkinson's shift (Golub & Van Loan §8.3; values
// only), root-free (rotate_row). The lanes run in step: each finds its own split point m_lane, and
// a sweep runs down from the largest, each lane rotating only below its own. An off-diagonal counts
// as zero when it is within rounding of its neighbours or of the whole matrix's scale (`negligible`,
// ε·trace for a Gram matrix), so zero eigenvalues of a rank-deficient matrix end too.
template <int Lanes>
MEMSCOPE_SIMD_CLONES void ql_eigenvalues(double* __restrict d, double* __restrict e2,
                                         const double* __restrict negligible, int m) {
  constexpr double eps = std::numeric_limits<double>::epsilon();
  int64_t split[Lanes];
  LaneMask live[Lanes];
  double shift[Lanes], s[Lanes], c[Lanes], gamma[Lanes], p[Lanes];
  for (int l = 0; l < m; ++l) {
    for (int sweep = 0; sweep < kMaxSweepsPerEigenvalue; ++sweep) {
      // Each lane's split point: the first negligible off-diagonal at or below l (m − 1: none).
      LaneMask found[Lanes];
      for (int lane = 0; lane < Lanes; ++lane) {
        split[lane] = m - 1;
        found[lane] = 0;
      }
      for (int j = l; j + 1 < m; ++j) {
        const double* dj = d + j * Lanes;
        const double* dj1 = d + (j + 1) * Lanes;
        const double* ej = e2 + j * Lanes;
        LaneMask all = ~LaneMask{0};
        for (int lane = 0; lane < Lanes; ++lane) {
          const double near = eps * (std::fabs(dj[lane]) + std::fabs(dj1[lane]));
          const LaneMask small =
              mask_of(ej[lane] <= near * near) | mask_of(ej[lane] <= negligible[lane] * negligible[lane]);
          const LaneMask first = small & ~found[lane];
          split[lane] = (j & first) | (split[lane] & ~first);
          found[lane] |= small;
          all &= found[lane];
        }
        if (all) break;
      }
      int64_t deepest = l;
      for (int lane = 0; lane < Lanes; ++lane) deepest = std::max(deepest, split[lane]);
      if (deepest == l) break;  // d[l] is an eigenvalue in every lane
      for (int lane = 0; lane < Lanes; ++lane) {
        // Wilkinson's shift from the top 2×2 block, as dsterf forms it from e_l = √(e_l²).
        live[lane] = mask_of(split[lane] > l);
        const double e = std::sqrt(blend(live[lane], e2[l * Lanes + lane], 1.0));
        const double q = (d[(l + 1) * Lanes + lane] - d[l * Lanes + lane]) / (2.0 * e);
        const double r = std::sqrt(q * q + 1.0);
        shift[lane] = d[l * Lanes + lane] - e / (q + std::copysign(r, q));
        gamma[lane] = d[split[lane] * Lanes + lane] - shift[lane];  // a gather: scalar
        p[lane] = gamma[lane] * gamma[lane];
        s[lane] = 0.0;
        c[lane] = 1.0;
      }
      for (int64_t i = deepest - 1; i >= l; --i)
        rotate_row<Lanes>(d + i * Lanes, d + (i + 1) * Lanes, e2 + i * Lanes, e2 + (i + 1) * Lanes,
                          static_cast<int>(i), split, live, shift, s, c, gamma, p);
      for (int lane = 0; lane < Lanes; ++lane) {
        e2[l * Lanes + lane] = blend(live[lane], s[lane] * p[lane], e2[l * Lanes + lane]);
        d[l * Lanes + lane] = blend(live[lane], shift[lane] + gamma[lane], d[l * Lanes + lane]);
      }
    }
  }
}

// The Gram matrices G = A Aᵀ (A's m vectors of length n, its rows or its columns) in double: float
// products are exact there, so the eigenvalues λ = σ² carry an error of about ε_double·‖A‖², and
// σ = √λ one of at most √ε_double·σ_max ≈ 1e-8·σ_max. Two ways, by size (kInterleavedLimit).
// Four lanes: one AVX2 register, two SSE2 ones. Wider GCC vectors are lowered through the stack.
typedef double Quad __attribute__((vector_size(4 * sizeof(double))));
constexpr int64_t kInterleavedLimit = 4096;  // doubles: 32 KB, an L1 data cache

// The Gram matrices of a small group (Lanes · r · c ≤ kInterleavedLimit) all at once, each vector
// lane-interleaved as a[(i·n + k)·Lanes + lane], one lane per matrix: no horizontal sums. Beyond
// L1 (16 matrices 16×64 are 128 KB interleaved) every product read its operands from L2, and a
// matrix at a time is faster (gram_into_lane, below).
// Entries (i, j) … (i, j + Rows − 1) of G (the lower triangle: all that tridiagonalise reads), vector i read
// once for Rows products, with Rows · Lanes / 4 accumulators held in registers. Written as one loop over the
// lanes, GCC 12 vectorised the loop over k instead when Lanes was 8 on AVX2, with a horizontal sum
// per entry: 15 µs for 8 matrices 16×16.
template <int Lanes, int Rows>
[[gnu::always_inline]] inline void gram_block(const double* __restrict a, double* __restrict g, int m, int n, int i, int j) {
  constexpr int kQuads = Lanes / 4;
  Quad sum[Rows][kQuads] = {};
  for (int k = 0; k < n; ++k) {
#pragma GCC unroll 4
    for (int q = 0; q < kQuads; ++q) {
      Quad x;
      std::memcpy(&x, a + (i * n + k) * Lanes + 4 * q, sizeof x);
#pragma GCC unroll 4
      for (int b = 0; b < Rows; ++b) {
        Quad y;
        std::memcpy(&y, a + ((j + b) * n + k) * Lanes + 4 * q, sizeof y);
        sum[b][q] += x * y;
      }
    }
  }
#pragma GCC unroll 4
  for (int b = 0; b < Rows; ++b) {
    std::memcpy(g + (i * m + j + b) * Lanes, sum[b], sizeof sum[b]);
  }
}

// Eight accumulators a block: four entries of a row at a time in groups of 8, two in groups of 16.
template <int Lanes>
MEMSCOPE_SIMD_CLONES
void gram_of(const double* __restrict a, double* __restrict g, int m, int n) {
  static_assert(Lanes % 4 == 0 && 32 % Lanes == 0, "gram_of: 8 or 16 lanes");
  constexpr int kBlock = 32 / Lanes;
  for (int i = 0; i < m; ++i) {
    int j = 0;
    for (; j + kBlock <= i + 1; j += kBlock) gram_block<Lanes, kBlock>(a, g, m, n, i, j);
    for (; j <= i; ++j) gram_block<Lanes, 1>(a, g, m, n, i, j);
  }
}

// A larger group's, a matrix at a time: its vectors first copied to double rows zero-padded to a
// multiple of the tile and the vector (`rows`, mp × np: 8 KB at 16×64), then each product a tile of entries,
// a vector of k at once, into lane `lane` of the group's interleaved G. With four-double vectors (AVX2; the
// portable copy) a tile is 4×2 entries: eight accumulators, six loads and eight fused multiply-adds
// per step. 16 matrices 16×64: 72–101 → 65–74 µs a call, three alternated rounds (AMD VM); at 16×16
// it took 5% longer than the interleaved way, hence the limit. AVX-512 takes eight-double vectors
// and 4×4 tiles (sixteen accumulators of its 32 registers, eight loads a step): two stacks of ten
// of HOPE's 64×256 matrices, 2.4 → 1.9 ms (Intel VM, bench/probe_breakdown spectra_us).
//
// Entries G[i0..i0+TileI−1][j0..j0+TileJ−1] of padded rows (np a multiple of the vector's width),
// into `lane` of g where they lie on or below the diagonal of the m×m matrix (the lower triangle:
// all that tridiagonalise reads). Always inlined into each instruction set's copy of
// gram_into_lane, for its registers and its FMA.
template <typename Vec, int TileI, int TileJ>
[[gnu::always_inline]] inline void gram_tile(const double* __restrict rows, int np, int i0, int j0, int m,
                                             double* __restrict g, int lanes, int lane) {
  constexpr int kWidth = sizeof(Vec) / sizeof(double);
  Vec sum[TileI][TileJ] = {};
  for (int k = 0; k < np; k += kWidth) {
    Vec x[TileI], y[TileJ];
#pragma GCC unroll 4
    for (int b = 0; b < TileJ; ++b) std::memcpy(&y[b], rows + (j0 + b) * np + k, sizeof(Vec));
#pragma GCC unroll 4
    for (int a = 0; a < TileI; ++a) {
      std::memcpy(&x[a], rows + (i0 + a) * np + k, sizeof(Vec));
#pragma GCC unroll 4
      for (int b = 0; b < TileJ; ++b) sum[a][b] += x[a] * y[b];
    }
  }
  for (int a = 0; a < TileI; ++a)
    for (int b = 0; b < TileJ; ++b) {
      const int i = i0 + a, j = j0 + b;
      if (i >= m || j > i) continue;
      double entry = 0;
      for (int q = 0; q < kWidth; ++q) entry += sum[a][b][q];
      g[(i * m + j) * lanes + lane] = entry;
    }
}

// Rows and vectors are padded to a multiple of the tile's rows and of the vector's width, at most
// this (the widest vector's), for which the scratch is sized.
constexpr int kGramPad = 8;

template <typename Vec, int TileI, int TileJ>
[[gnu::always_inline]] inline void gram_into_lane_body(const float* __restrict matrix, int64_t r, int64_t c,
                                                       double* __restrict rows, double* __restrict g,
                                                       int lanes, int lane) {
  const bool by_rows = r <= c;  // the Gram matrix of the shorter side: A Aᵀ or Aᵀ A, m×m
  const int m = static_cast<int>(std::min(r, c)), n = static_cast<int>(std::max(r, c));
  constexpr int kWidth = sizeof(Vec) / sizeof(double);
  static_assert(TileI % TileJ == 0 && TileI <= kGramPad && kWidth <= kGramPad, "gram tiles: padding");
  const int mp = (m + TileI - 1) / TileI * TileI, np = (n + kWidth - 1) / kWidth * kWidth;
  if (by_rows) {
    for (int p = 0; p < m; ++p)
      for (int k = 0; k < n; ++k) rows[p * np + k] = matrix[p * c + k];
  } else {
    // A tall matrix's columns, by bands of kTallBand of its rows, each band's cache lines read once
    // for all its columns. A column at a time read every line 16 times (once for each column it
    // holds), from L2 at HOPE's 256×64: 16 such matrices took 996–1,039 µs against 856–863 for 16
    // of 64×256 (Intel VM); by bands, 892–918.
    constexpr int kTallBand = 16;
    for (int k0 = 0; k0 < n; k0 += kTallBand) {
      const int k1 = std::min(n, k0 + kTallBand);
      for (int p = 0; p < m; ++p)
        for (int k = k0; k < k1; ++k) rows[p * np + k] = matrix[k * c + p];
    }
  }
  for (int p = 0; p < m; ++p) std::fill(rows + p * np + n, rows + (p + 1) * np, 0.0);
  std::fill(rows + m * np, rows + mp * np, 0.0);
  for (int i0 = 0; i0 < mp; i0 += TileI)
    for (int j0 = 0; j0 < i0 + TileI; j0 += TileJ)
      gram_tile<Vec, TileI, TileJ>(rows, np, i0, j0, m, g, lanes, lane);
}

typedef double Oct __attribute__((vector_size(8 * sizeof(double))));

using GramIntoLane = void (*)(const float*, int64_t, int64_t, double*, double*, int, int);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx512f")]] void gram_into_lane_avx512(const float* matrix, int64_t r, int64_t c, double* rows,
                                                      double* g, int lanes, int lane) {
  gram_into_lane_body<Oct, 4, 4>(matrix, r, c, rows, g, lanes, lane);
}
[[gnu::target("avx2,fma")]] void gram_into_lane_avx2(const float* matrix, int64_t r, int64_t c, double* rows,
                                                     double* g, int lanes, int lane) {
  gram_into_lane_body<Quad, 4, 2>(matrix, r, c, rows, g, lanes, lane);
}
#endif
void gram_into_lane_portable(const float* matrix, int64_t r, int64_t c, double* rows, double* g, int lanes,
                             int lane) {
  gram_into_lane_body<Quad, 4, 2>(matrix, r, c, rows, g, lanes, lane);
}

// The widest copy this CPU runs, chosen once (as small_gemm does: target_clones("avx2") would
// leave out FMA).
void gram_into_lane(const float* matrix, int64_t r, int64_t c, double* rows, double* g, int lanes, int lane) {
  static const GramIntoLane kernel = [] {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f")) return &gram_into_lane_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &gram_into_lane_avx2;
#endif
    return &gram_into_lane_portable;
  }();
  kernel(matrix, r, c, rows, g, lanes, lane);
}

// The singular values of `lanes` (at most Lanes) matrices from `matrices` on, which share their
// shorter side m and their longer side n (each wide or tall), into their rows of `out` ([·, m]).
// `a` holds Lanes · m · n doubles (a small group's interleaved vectors) or one matrix's padded
// vectors (gram_into_lane), `gram` Lanes · m², and `zeros` m · n floats.
template <int Lanes>
void singular_values_of_group(const HostMatrix* matrices, int64_t lanes, NonFinite non_finite, double* a,
                              double* gram, const float* zeros, float* out) {
  const int64_t area = matrices[0].rows * matrices[0].cols;
  const int m = static_cast<int>(std::min(matrices[0].rows, matrices[0].cols));
  const int n = static_cast<int>(std::max(matrices[0].rows, matrices[0].cols));
  std::vector<double> d(static_cast<size_t>(m * Lanes)), e(d.size()), sigma(static_cast<size_t>(m));
  double negligible[Lanes];
  bool measured[Lanes];
  // A lane beyond the count reads zeros, and so does one whose matrix is not finite: its σ are NaN,
  // or (NonFinite::ReadAsZero) those of a copy with NaN and Inf as 0, made here (rarely needed).
  const float* from[Lanes];
  int64_t rows[Lanes], cols[Lanes];
  std::unique_ptr<float[]> zeroed;  // not zero-filled: each lane's part is written before it is read
  for (int lane = 0; lane < Lanes; ++lane) {
    from[lane] = zeros;
    rows[lane] = m;
    cols[lane] = n;
    measured[lane] = false;
    if (lane >= lanes) continue;
    const HostMatrix& x = matrices[lane];
    rows[lane] = x.rows;
    cols[lane] = x.cols;
    if (all_finite(x.data, area)) {
      from[lane] = x.data;
      measured[lane] = true;
    } else if (non_finite == NonFinite::ReadAsZero) {
      if (!zeroed) zeroed.reset(new float[static_cast<size_t>(Lanes * area)]);  // once: pointers stay valid
      float* copy = zeroed.get() + lane * area;
      copy_finite(x.data, copy, area);
      from[lane] = copy;
      measured[lane] = true;
    }
  }
  if (Lanes * area <= kInterleavedLimit) {
    // Vector p is row p of a wide matrix, column p of a tall one; each entry's lanes are one
    // contiguous store. A padding lane (zeros) takes the first matrix's way.
    int64_t step_p[Lanes], step_k[Lanes];
    bool one_way = true;
    for (int lane = 0; lane < Lanes; ++lane) {
      const int64_t r = lane < lanes ? rows[lane] : rows[0], c = lane < lanes ? cols[lane] : cols[0];
      step_p[lane] = r <= c ? c : 1;
      step_k[lane] = r <= c ? 1 : c;
      one_way = one_way && step_p[lane] == step_p[0];
    }
    for (int64_t p = 0; p < m; ++p)
      for (int64_t k = 0; k < n; ++k) {
        double* to = a + (p * n + k) * Lanes;
        if (one_way) {  // a place per lane took 4–6% longer for 16 matrices 16×16 (Intel VM)
          const int64_t at = p * step_p[0] + k * step_k[0];
          for (int lane = 0; lane < Lanes; ++lane) to[lane] = from[lane][at];
        } else {
          for (int lane = 0; lane < Lanes; ++lane) to[lane] = from[lane][p * step_p[lane] + k * step_k[lane]];
        }
      }
    gram_of<Lanes>(a, gram, m, n);
  } else {
    // A padding or unmeasured lane's Gram matrix is zero: written, not computed.
    for (int lane = 0; lane < Lanes; ++lane) {
      if (measured[lane]) {
        gram_into_lane(from[lane], rows[lane], cols[lane], a, gram, Lanes, lane);
      } else {
        for (int i = 0; i < m * m; ++i) gram[i * Lanes + lane] = 0.0;
      }
    }
  }
  for (int lane = 0; lane < Lanes; ++lane) {
    double trace = 0;
    for (int i = 0; i < m; ++i) trace += gram[static_cast<size_t>((i * m + i) * Lanes + lane)];
    negligible[lane] = std::numeric_limits<double>::epsilon() * trace;
  }
  tridiagonalise<Lanes>(gram, d.data(), e.data(), m);
  for (size_t i = 0; i < e.size(); ++i) e[i] *= e[i];  // the root-free QL's e²
  ql_eigenvalues<Lanes>(d.data(), e.data(), negligible, m);
  for (int64_t lane = 0; lane < lanes; ++lane) {
    for (int i = 0; i < m; ++i) sigma[static_cast<size_t>(i)] = std::sqrt(std::max(d[static_cast<size_t>(i * Lanes + lane)], 0.0));
    std::sort(sigma.begin(), sigma.end(), std::greater<double>());
    float* to = out + lane * m;
    for (int i = 0; i < m; ++i)
      to[i] = measured[lane] ? static_cast<float>(sigma[static_cast<size_t>(i)])
                             : std::numeric_limits<float>::quiet_NaN();
  }
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> singular_value_groups(int64_t count) {
  std::vector<std::pair<int64_t, int64_t>> groups;
  for (int64_t first = 0; first < count;) {
    const int64_t left = count - first;
    const int64_t lanes = left > kNarrowGroup ? std::min<int64_t>(left, kWideGroup) : left;
    groups.emplace_back(first, lanes);
    first += lanes;
  }
  return groups;
}

void small_singular_values_into(const std::vector<HostMatrix>& matrices, NonFinite non_finite, float* out) {
  if (matrices.empty()) return;
  const auto sides = [](const HostMatrix& x) {
    return std::pair<int64_t, int64_t>{std::min(x.rows, x.cols), std::max(x.rows, x.cols)};
  };
  const auto [m, n] = sides(matrices.front());
  for (const HostMatrix& x : matrices)
    TORCH_CHECK(sides(x) == sides(matrices.front()), "small_singular_values_into: a ", x.rows, "×", x.cols,
                " matrix among ", m, "×", n, " ones");
  TORCH_CHECK(m <= kSmallSingularValueSide, "small_singular_values_into: shorter side ", m, " beyond ",
              kSmallSingularValueSide);
  if (m == 0) return;
  const auto groups = singular_value_groups(static_cast<int64_t>(matrices.size()));
  // Zeros for the padding lanes and the lanes NaN is asked of: this thread's, grown as needed and
  // never written. Taken by pointer: a lambda does not capture a thread_local, and a group that a
  // waiting thread takes would read that thread's own.
  thread_local std::vector<float> zeros_here;
  if (zeros_here.size() < static_cast<size_t>(m * n)) zeros_here.assign(static_cast<size_t>(m * n), 0.0f);
  const float* zeros = zeros_here.data();
  // A group at a time, each thread with its own scratch, written in full for every group before it
  // is read: no zeroing. Groups of matrices with a side of 32 or more are shared with a thread
  // waiting for this one (model/util/work_share.h): a group of HOPE's 64×256 took 0.7–1 ms. Smaller
  // ones are not: Titans-MLP's 16×64 take about 30 µs a group, and shared, every probed token's,
  // the engine thread's next step ran slower (the default probes' overhead +42 → +54%, Intel VM).
  const auto one_group = [&](int64_t g) {
    thread_local std::vector<double> a, gram;
    const int64_t padded =
        (m + kGramPad - 1) / kGramPad * kGramPad * ((n + kGramPad - 1) / kGramPad * kGramPad);
    a.resize(std::max<size_t>(
        a.size(), static_cast<size_t>(std::max(std::min(m * n * kWideGroup, kInterleavedLimit), padded))));
    gram.resize(std::max<size_t>(gram.size(), static_cast<size_t>(m * m * kWideGroup)));
    const auto [first, lanes] = groups[static_cast<size_t>(g)];
    const HostMatrix* from = matrices.data() + first;
    float* to = out + first * m;
    if (lanes > kNarrowGroup) {
      singular_values_of_group<kWideGroup>(from, lanes, non_finite, a.data(), gram.data(), zeros, to);
    } else {
      singular_values_of_group<kNarrowGroup>(from, lanes, non_finite, a.data(), gram.data(), zeros, to);
    }
  };
  if (m >= kSharedSingularValueSide) {
    for_each_shared(static_cast<int64_t>(groups.size()), one_group);
  } else {
    for (int64_t g = 0; g < static_cast<int64_t>(groups.size()); ++g) one_group(g);
  }
}

at::Tensor small_singular_values(const at::Tensor& matrices) {
  TORCH_CHECK(matrices.dim() == 3, "small_singular_values: expected [N, r, c], got ", matrices.sizes());
  const int64_t count = matrices.size(0), r = matrices.size(1), c = matrices.size(2);
  if (!matrices.device().is_cpu() || matrices.scalar_type() != at::kFloat ||
      std::min(r, c) > kSmallSingularValueSide)
    return at::linalg_svdvals(matrices);
  const at::Tensor source = matrices.contiguous();
  at::Tensor out = at::empty({count, std::min(r, c)}, matrices.options());
  if (out.numel() == 0) return out;
  std::vector<HostMatrix> views;
  views.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) views.push_back({source.data_ptr<float>() + i * r * c, r, c});
  small_singular_values_into(views, NonFinite::Nan, out.data_ptr<float>());
  return out;
}

}  // namespace memscope::model
