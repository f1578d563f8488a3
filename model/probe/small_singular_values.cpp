#include "model/probe/small_singular_values.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "model/util/simd_clones.h"

namespace memscope::model {

namespace {

// Matrices per group. Each loop over `lane` is two AVX-512 instructions of doubles; two
// independent registers per step also hide half of the QL sweep's latency chain.
constexpr int kLanes = 16;
constexpr int kMaxSweepsPerEigenvalue = 30;

// One group of up to kLanes symmetric m×m matrices, lane-interleaved: g[(i·m + j)·kLanes + lane].
// Householder reflections reduce each to tridiagonal form, in place: the diagonal goes to d[i·kLanes
// + lane] and the off-diagonal (coupling i and i+1) to e[i·kLanes + lane]; e's last row is zeroed.
// A column whose part below the subdiagonal is already zero gets no reflection (τ = 0).
MEMSCOPE_SIMD_CLONES
void tridiagonalise(double* __restrict g, double* __restrict d, double* __restrict e, int m) {
  std::vector<double> v(static_cast<size_t>(m * kLanes)), w(v.size());
  double tau[kLanes], k_half[kLanes];
  auto at = [&](int i, int j) { return g + (i * m + j) * kLanes; };
  for (int k = 0; k + 2 < m; ++k) {
    // x = column k below the diagonal; H x = α e₁ with α = −sign(x₀)‖x‖ (no cancellation in x₀ − α).
    double tail[kLanes] = {};
    for (int i = k + 2; i < m; ++i)
      for (int lane = 0; lane < kLanes; ++lane) tail[lane] += at(i, k)[lane] * at(i, k)[lane];
    for (int lane = 0; lane < kLanes; ++lane) {
      const double x0 = at(k + 1, k)[lane];
      const double alpha = -std::copysign(std::sqrt(x0 * x0 + tail[lane]), x0);
      const bool reflect = tail[lane] > 0;
      const double v0 = x0 - alpha;
      v[(k + 1) * kLanes + lane] = v0;
      tau[lane] = reflect ? 2.0 / (v0 * v0 + tail[lane]) : 0.0;
      e[k * kLanes + lane] = reflect ? alpha : x0;
      d[k * kLanes + lane] = at(k, k)[lane];
    }
    for (int i = k + 2; i < m; ++i)
      for (int lane = 0; lane < kLanes; ++lane) v[i * kLanes + lane] = at(i, k)[lane];
    // H G H = G − v wᵀ − w vᵀ on the trailing block, with p = τ G v and w = p − (τ vᵀp / 2) v.
    for (int i = k + 1; i < m; ++i) {
      double p[kLanes] = {};
      for (int j = k + 1; j < m; ++j)
        for (int lane = 0; lane < kLanes; ++lane) p[lane] += at(i, j)[lane] * v[j * kLanes + lane];
      for (int lane = 0; lane < kLanes; ++lane) w[i * kLanes + lane] = tau[lane] * p[lane];
    }
    for (int lane = 0; lane < kLanes; ++lane) k_half[lane] = 0;
    for (int i = k + 1; i < m; ++i)
      for (int lane = 0; lane < kLanes; ++lane) k_half[lane] += v[i * kLanes + lane] * w[i * kLanes + lane];
    for (int lane = 0; lane < kLanes; ++lane) k_half[lane] *= 0.5 * tau[lane];
    for (int i = k + 1; i < m; ++i)
      for (int lane = 0; lane < kLanes; ++lane) w[i * kLanes + lane] -= k_half[lane] * v[i * kLanes + lane];
    for (int i = k + 1; i < m; ++i)
      for (int j = k + 1; j < m; ++j)
        for (int lane = 0; lane < kLanes; ++lane)
          at(i, j)[lane] -= v[i * kLanes + lane] * w[j * kLanes + lane] + w[i * kLanes + lane] * v[j * kLanes + lane];
  }
  for (int lane = 0; lane < kLanes; ++lane) {
    if (m >= 2) {
      d[(m - 2) * kLanes + lane] = at(m - 2, m - 2)[lane];
      e[(m - 2) * kLanes + lane] = at(m - 1, m - 2)[lane];
    }
    d[(m - 1) * kLanes + lane] = at(m - 1, m - 1)[lane];
    e[(m - 1) * kLanes + lane] = 0;
  }
}

// One step of a QL sweep (row i) in every lane still rotating below its split point. Branch-free
// so that it vectorises: a lane that does not rotate keeps its values through the selects. Inlined
// into each of ql_eigenvalues' clones, so that it is built for the clone's vector width.
[[gnu::always_inline]] inline void rotate_row(double* __restrict di, double* __restrict di1, const double* __restrict ei,
                       double* __restrict ei1, int i, const int* __restrict split, int* __restrict live,
                       int* __restrict stopped, double* __restrict s, double* __restrict c, double* __restrict g,
                       double* __restrict p) {
  for (int lane = 0; lane < kLanes; ++lane) {
    const int rotate = live[lane] & static_cast<int>(i < split[lane]);  // &: no branch
    const double f = s[lane] * ei[lane], b = c[lane] * ei[lane];
    const double r = std::sqrt(f * f + g[lane] * g[lane]);
    // r = 0: the rotation would be 0/0; the lane deflates here instead (d[i+1] − p) and skips the
    // sweep's last update, as the scalar algorithm breaks out of its sweep.
    const int degenerate = rotate & static_cast<int>(r == 0.0);
    const int turn = rotate & static_cast<int>(r != 0.0);
    const double inv = 1.0 / (turn ? r : 1.0);
    const double sn = f * inv, cs = g[lane] * inv;
    const double gn = di1[lane] - p[lane];
    const double rn = (di[lane] - gn) * sn + 2.0 * cs * b;
    const double pn = sn * rn;
    ei1[lane] = turn ? r : ei1[lane];
    di1[lane] = turn ? gn + pn : (degenerate ? gn : di1[lane]);
    s[lane] = turn ? sn : s[lane];
    c[lane] = turn ? cs : c[lane];
    p[lane] = turn ? pn : p[lane];
    g[lane] = turn ? cs * rn - b : g[lane];
    live[lane] = live[lane] & (1 - degenerate);
    stopped[lane] = stopped[lane] | degenerate;
  }
}

// The eigenvalues of kLanes symmetric tridiagonal matrices (d, e as tridiagonalise leaves them), in
// place in d, by the implicit QL algorithm with Wilkinson's shift (Golub & Van Loan §8.3; values
// only). The lanes run in step: each finds its own split point m_lane, and a sweep runs down from
// the largest, each lane rotating only below its own. An off-diagonal counts as zero when it is
// within rounding of its neighbours or of the whole matrix's scale (`negligible`, ε·trace for a
// Gram matrix), so zero eigenvalues of a rank-deficient matrix end too.
MEMSCOPE_SIMD_CLONES
void ql_eigenvalues(double* __restrict d, double* __restrict e, const double* __restrict negligible, int m) {
  constexpr double eps = std::numeric_limits<double>::epsilon();
  int split[kLanes], live[kLanes], stopped[kLanes];
  double s[kLanes], c[kLanes], g[kLanes], p[kLanes];
  for (int l = 0; l < m; ++l) {
    for (int sweep = 0; sweep < kMaxSweepsPerEigenvalue; ++sweep) {
      // Each lane's split point: the first negligible off-diagonal at or below l (m − 1: none).
      int found[kLanes];
      for (int lane = 0; lane < kLanes; ++lane) {
        split[lane] = m - 1;
        found[lane] = 0;
      }
      for (int j = l; j + 1 < m; ++j) {
        const double* dj = d + j * kLanes;
        const double* dj1 = d + (j + 1) * kLanes;
        const double* ej = e + j * kLanes;
        int all = 1;
        for (int lane = 0; lane < kLanes; ++lane) {
          const double off = std::fabs(ej[lane]);
          const int small = static_cast<int>(off <= eps * (std::fabs(dj[lane]) + std::fabs(dj1[lane]))) |
                            static_cast<int>(off <= negligible[lane]);
          split[lane] = (small & (1 - found[lane])) ? j : split[lane];
          found[lane] |= small;
          all &= found[lane];
        }
        if (all) break;
      }
      int deepest = l;
      for (int lane = 0; lane < kLanes; ++lane) deepest = std::max(deepest, split[lane]);
      if (deepest == l) break;  // d[l] is an eigenvalue in every lane
      for (int lane = 0; lane < kLanes; ++lane) {
        live[lane] = split[lane] > l;
        stopped[lane] = 0;
        const double el = live[lane] ? e[l * kLanes + lane] : 1.0;
        const double q = (d[(l + 1) * kLanes + lane] - d[l * kLanes + lane]) / (2.0 * el);
        const double r = std::sqrt(q * q + 1.0);
        g[lane] = d[split[lane] * kLanes + lane] - d[l * kLanes + lane] + el / (q + std::copysign(r, q));
        s[lane] = 1.0;
        c[lane] = 1.0;
        p[lane] = 0.0;
      }
      for (int i = deepest - 1; i >= l; --i)
        rotate_row(d + i * kLanes, d + (i + 1) * kLanes, e + i * kLanes, e + (i + 1) * kLanes, i, split, live, stopped, s, c, g, p);
      for (int lane = 0; lane < kLanes; ++lane) {
        if (live[lane]) {
          d[l * kLanes + lane] -= p[lane];
          e[l * kLanes + lane] = g[lane];
        }
        if (live[lane] | stopped[lane]) e[split[lane] * kLanes + lane] = 0.0;
      }
    }
  }
}

// The Gram matrices G = A Aᵀ of a group (A's m vectors of length n, lane-interleaved as
// a[(i·n + k)·kLanes + lane]) in double: float products are exact there, so the eigenvalues λ = σ²
// carry an error of about ε_double·‖A‖², and σ = √λ one of at most √ε_double·σ_max ≈ 1e-8·σ_max.
// Four rows of G at a time, so that vector i is read once for four products.
MEMSCOPE_SIMD_CLONES
void gram_of(const double* __restrict a, double* __restrict g, int m, int n) {
  auto store = [&](int i, int j, const double* sum) {
    for (int lane = 0; lane < kLanes; ++lane) g[(i * m + j) * kLanes + lane] = g[(j * m + i) * kLanes + lane] = sum[lane];
  };
  for (int i = 0; i < m; ++i) {
    const double* ai = a + i * n * kLanes;
    int j = 0;
    for (; j + 3 <= i; j += 4) {
      double s0[kLanes] = {}, s1[kLanes] = {}, s2[kLanes] = {}, s3[kLanes] = {};
      const double *a0 = a + j * n * kLanes, *a1 = a0 + n * kLanes, *a2 = a1 + n * kLanes, *a3 = a2 + n * kLanes;
      for (int k = 0; k < n; ++k)
        for (int lane = 0; lane < kLanes; ++lane) {
          const double x = ai[k * kLanes + lane];
          s0[lane] += x * a0[k * kLanes + lane];
          s1[lane] += x * a1[k * kLanes + lane];
          s2[lane] += x * a2[k * kLanes + lane];
          s3[lane] += x * a3[k * kLanes + lane];
        }
      store(i, j, s0);
      store(i, j + 1, s1);
      store(i, j + 2, s2);
      store(i, j + 3, s3);
    }
    for (; j <= i; ++j) {
      double sum[kLanes] = {};
      const double* aj = a + j * n * kLanes;
      for (int k = 0; k < n; ++k)
        for (int lane = 0; lane < kLanes; ++lane) sum[lane] += ai[k * kLanes + lane] * aj[k * kLanes + lane];
      store(i, j, sum);
    }
  }
}

}  // namespace

at::Tensor small_singular_values(const at::Tensor& matrices) {
  TORCH_CHECK(matrices.dim() == 3, "small_singular_values: expected [N, r, c], got ", matrices.sizes());
  const int64_t count = matrices.size(0), r = matrices.size(1), c = matrices.size(2);
  if (!matrices.device().is_cpu() || matrices.scalar_type() != at::kFloat || std::max(r, c) > kSmallSingularValueSide)
    return at::linalg_svdvals(matrices);
  const at::Tensor source = matrices.contiguous();
  const int m = static_cast<int>(std::min(r, c)), n = static_cast<int>(std::max(r, c));
  const bool by_rows = r <= c;  // the Gram matrix of the shorter side: A Aᵀ or Aᵀ A, m×m
  at::Tensor out = at::empty({count, m}, matrices.options());
  if (count == 0 || m == 0) return out;
  // Written in full for every group before they are read: no zeroing (128 KB at 16×64).
  const std::unique_ptr<double[]> a(new double[static_cast<size_t>(m * n * kLanes)]);
  const std::unique_ptr<double[]> gram(new double[static_cast<size_t>(m * m * kLanes)]);
  std::vector<double> d(static_cast<size_t>(m * kLanes)), e(d.size()), sigma(static_cast<size_t>(m));
  const std::vector<float> zeros(static_cast<size_t>(r * c), 0.0f);
  double negligible[kLanes];
  bool finite[kLanes];
  for (int64_t first = 0; first < count; first += kLanes) {
    const int64_t lanes = std::min<int64_t>(kLanes, count - first);
    // A lane beyond the count, or whose matrix is not finite (its σ are NaN), reads zeros.
    const float* from[kLanes];
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      const float* matrix = source.data_ptr<float>() + (first + std::min<int64_t>(lane, lanes - 1)) * r * c;
      finite[lane] = lane < lanes;
      for (int64_t i = 0; i < r * c && finite[lane]; ++i) finite[lane] = std::isfinite(matrix[i]);
      from[lane] = finite[lane] ? matrix : zeros.data();
    }
    // Vector p is row p (by rows) or column p; each entry's 16 lanes are one contiguous store.
    for (int64_t p = 0; p < m; ++p)
      for (int64_t k = 0; k < n; ++k) {
        const int64_t at = by_rows ? p * c + k : k * c + p;
        double* to = a.get() + (p * n + k) * kLanes;
        for (int lane = 0; lane < kLanes; ++lane) to[lane] = from[lane][at];
      }
    gram_of(a.get(), gram.get(), m, n);
    for (int lane = 0; lane < kLanes; ++lane) {
      double trace = 0;
      for (int i = 0; i < m; ++i) trace += gram[static_cast<size_t>((i * m + i) * kLanes + lane)];
      negligible[lane] = std::numeric_limits<double>::epsilon() * trace;
    }
    tridiagonalise(gram.get(), d.data(), e.data(), m);
    ql_eigenvalues(d.data(), e.data(), negligible, m);
    for (int64_t lane = 0; lane < lanes; ++lane) {
      for (int i = 0; i < m; ++i) sigma[static_cast<size_t>(i)] = std::sqrt(std::max(d[static_cast<size_t>(i * kLanes + lane)], 0.0));
      std::sort(sigma.begin(), sigma.end(), std::greater<double>());
      float* to = out.data_ptr<float>() + (first + lane) * m;
      for (int i = 0; i < m; ++i)
        to[i] = finite[lane] ? static_cast<float>(sigma[static_cast<size_t>(i)]) : std::numeric_limits<float>::quiet_NaN();
    }
  }
  return out;
}

}  // namespace memscope::model
