#include "model/probe/small_singular_values.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "model/util/simd_clones.h"

namespace memscope::model {

namespace {

constexpr int kLanes = 16;  // matrices per group: one AVX-512 register of floats

// One group of up to kLanes matrices as m vectors of length n, lane-interleaved:
// v[(i·n + k)·kLanes + lane]. Jacobi rotations make the m vectors mutually orthogonal; their norms
// are then the singular values (Demmel & Veselić, "Jacobi's method is more accurate than QR").
// Each loop over `lane` is one vector instruction; target_clones builds AVX-512 and AVX2 copies.
// The pairs go in round-robin order: each round's m/2 pairs are disjoint, so a round runs in three
// phases — every pair's dot product, then every rotation angle, then every rotation — and each
// phase's pairs are independent and overlap in the core instead of each waiting on the last one's
// division and square roots (30% faster than pair after pair on an AVX-512 Xeon, same bits).
MEMSCOPE_SIMD_CLONES
void orthogonalise(float* __restrict v, float* __restrict norms, int m, int n) {
  // A pair counts as orthogonal when |v_p·v_q| ≤ tol·‖v_p‖‖v_q‖. The float dot product of n terms
  // is itself only good to about n ulps, so a tighter tolerance would rotate forever; the singular
  // values' error is second order in it.
  const float tolerance = 2.0f * static_cast<float>(n) * std::numeric_limits<float>::epsilon();
  const float tolerance_sq = tolerance * tolerance;
  constexpr int kMaxSweeps = 30;
  auto recompute_norms = [&] {
    for (int i = 0; i < m; ++i) {
      float* out = norms + i * kLanes;
      for (int lane = 0; lane < kLanes; ++lane) out[lane] = 0;
      for (int k = 0; k < n; ++k) {
        const float* x = v + (i * n + k) * kLanes;
        for (int lane = 0; lane < kLanes; ++lane) out[lane] += x[lane] * x[lane];
      }
    }
  };
  // The circle method: slot 0 stays, the others turn by one each round. An odd m gets an empty
  // slot (index m) whose pair is skipped.
  const int slots = m + (m % 2);
  std::vector<int> order(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) order[static_cast<size_t>(i)] = i;
  std::vector<float> dots(static_cast<size_t>(slots / 2 * kLanes)), c(dots.size()), s(dots.size());
  std::vector<int> first(static_cast<size_t>(slots / 2)), second(first.size());
  recompute_norms();
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    bool rotated = false;
    for (int round = 0; round < slots - 1; ++round) {
      int pairs = 0;
      for (int i = 0; i < slots / 2; ++i) {
        const int p = order[static_cast<size_t>(i)], q = order[static_cast<size_t>(slots - 1 - i)];
        if (p == m || q == m) continue;  // the empty slot
        first[static_cast<size_t>(pairs)] = std::min(p, q);
        second[static_cast<size_t>(pairs)] = std::max(p, q);
        ++pairs;
      }
      for (int pair = 0; pair < pairs; ++pair) {  // every pair's dot product
        const float* __restrict vp = v + first[static_cast<size_t>(pair)] * n * kLanes;
        const float* __restrict vq = v + second[static_cast<size_t>(pair)] * n * kLanes;
        float dot[kLanes] = {}, dot2[kLanes] = {};  // two chains halve the wait on the FMA latency
        int k = 0;
        for (; k + 1 < n; k += 2)
          for (int lane = 0; lane < kLanes; ++lane) {
            dot[lane] += vp[k * kLanes + lane] * vq[k * kLanes + lane];
            dot2[lane] += vp[(k + 1) * kLanes + lane] * vq[(k + 1) * kLanes + lane];
          }
        for (; k < n; ++k)
          for (int lane = 0; lane < kLanes; ++lane) dot[lane] += vp[k * kLanes + lane] * vq[k * kLanes + lane];
        float* __restrict out = dots.data() + pair * kLanes;
        for (int lane = 0; lane < kLanes; ++lane) out[lane] = dot[lane] + dot2[lane];
      }
      for (int pair = 0; pair < pairs; ++pair) {  // every rotation angle
        float* __restrict np = norms + first[static_cast<size_t>(pair)] * kLanes;
        float* __restrict nq = norms + second[static_cast<size_t>(pair)] * kLanes;
        const float* __restrict gp = dots.data() + pair * kLanes;
        float* __restrict cp = c.data() + pair * kLanes;
        float* __restrict sp = s.data() + pair * kLanes;
        int active = 0;
        for (int lane = 0; lane < kLanes; ++lane) {
          const float a = np[lane], b = nq[lane], g = gp[lane];
          // Divisions and square roots are what a rotation waits on (~10 cycles each per AVX-512
          // instruction), so each takes two of each: the test without a root, and t below.
          // Orthogonal enough: |g| ≤ tol·√(ab), or |g| ≤ (tol/2)·max(a, b). The second test ends the
          // rotations of a (nearly) zero vector against a large one, as in a rank-deficient M at a
          // sequence start: each rotation leaves rounding noise of the large vector's size in the
          // small one, so the relative test alone would compare noise with noise forever. What it
          // leaves moves the small singular value by about tol·σ_large, float's own resolution.
          const float larger = std::max(a, b);
          const bool rotate = (g * g > tolerance_sq * a * b) &
                              (4.0f * g * g > tolerance_sq * larger * larger);  // &: branch-free, vectorised
          // The 2×2 Gram [[a, g], [g, b]] is diagonalised by the rotation with t = tan θ, the
          // smaller root (|θ| ≤ π/4) of t² + 2ζt − 1 = 0, ζ = (b − a)/2g; written without ζ:
          // t = sign(b − a)·2g / (|b − a| + √((b − a)² + 4g²)).
          const float diff = b - a;
          const float t = std::copysign(1.0f, diff) * 2.0f * g / (std::fabs(diff) + std::sqrt(diff * diff + 4.0f * g * g));
          const float tangent = rotate ? t : 0.0f;  // also drops 0/0 where g = 0 and a = b
          cp[lane] = 1.0f / std::sqrt(1.0f + tangent * tangent);
          sp[lane] = cp[lane] * tangent;
          np[lane] = a - tangent * g;
          nq[lane] = b + tangent * g;
          active += rotate;
        }
        rotated = rotated || active > 0;
        if (active == 0) second[static_cast<size_t>(pair)] = -1;  // every lane's pair is orthogonal: no rotation
      }
      for (int pair = 0; pair < pairs; ++pair) {  // every rotation
        if (second[static_cast<size_t>(pair)] < 0) continue;
        float* __restrict vp = v + first[static_cast<size_t>(pair)] * n * kLanes;
        float* __restrict vq = v + second[static_cast<size_t>(pair)] * n * kLanes;
        const float* __restrict cp = c.data() + pair * kLanes;
        const float* __restrict sp = s.data() + pair * kLanes;
        for (int k = 0; k < n; ++k)
          for (int lane = 0; lane < kLanes; ++lane) {
            const float x = vp[k * kLanes + lane], y = vq[k * kLanes + lane];
            vp[k * kLanes + lane] = cp[lane] * x - sp[lane] * y;
            vq[k * kLanes + lane] = sp[lane] * x + cp[lane] * y;
          }
      }
      std::rotate(order.begin() + 1, order.end() - 1, order.end());
    }
    recompute_norms();  // the updated norms drift by rounding; the next sweep starts exact
    if (!rotated) break;
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
  const bool by_rows = r <= c;  // orthogonalise the shorter side's vectors: fewer pairs
  at::Tensor out = at::empty({count, m}, matrices.options());
  std::vector<float> v(static_cast<size_t>(m * n * kLanes)), norms(static_cast<size_t>(m * kLanes));
  std::vector<float> sigma(static_cast<size_t>(m));
  for (int64_t first = 0; first < count; first += kLanes) {
    const int64_t lanes = std::min<int64_t>(kLanes, count - first);
    std::fill(v.begin(), v.end(), 0.0f);  // unused lanes hold zero matrices
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const float* a = source.data_ptr<float>() + (first + lane) * r * c;
      for (int64_t row = 0; row < r; ++row)
        for (int64_t col = 0; col < c; ++col) {
          const int64_t i = by_rows ? row : col, k = by_rows ? col : row;
          v[static_cast<size_t>((i * n + k) * kLanes + lane)] = a[row * c + col];
        }
    }
    orthogonalise(v.data(), norms.data(), m, n);
    for (int64_t lane = 0; lane < lanes; ++lane) {
      bool finite = true;
      for (int i = 0; i < m; ++i) {
        sigma[static_cast<size_t>(i)] = std::sqrt(norms[static_cast<size_t>(i * kLanes + lane)]);
        finite = finite && std::isfinite(sigma[static_cast<size_t>(i)]);
      }
      if (finite) std::sort(sigma.begin(), sigma.end(), std::greater<float>());  // NaN has no order
      else std::fill(sigma.begin(), sigma.end(), std::numeric_limits<float>::quiet_NaN());
      std::copy(sigma.begin(), sigma.end(), out.data_ptr<float>() + (first + lane) * m);
    }
  }
  return out;
}

}  // namespace memscope::model
