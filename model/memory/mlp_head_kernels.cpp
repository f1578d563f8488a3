#include "model/memory/mlp_head_kernels.h"

#include <algorithm>
#include <cmath>

#include "model/memory/gelu_math.h"
#include "model/util/simd_clones.h"
#include "model/util/sum_of_squares.h"

namespace memscope::model {

namespace {

constexpr float kLayerNormEps = 1e-5f;  // SPEC §3, as mlp_memory.cpp

inline float dot(const float* x, const float* y, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

}  // namespace

MEMSCOPE_SIMD_CLONES
void mlp_forward(const MlpHead& head, const float* __restrict z, int64_t rows, const float* __restrict w1,
                 const float* __restrict w2, float* __restrict h, float* __restrict a, float* __restrict n,
                 float* __restrict stdev, float* __restrict y) {
  const int64_t d = head.d, hidden = head.hidden;
  const float* __restrict ln_weight = head.ln_weight;
  const float* __restrict ln_bias = head.ln_bias;
  for (int64_t j = 0; j < hidden; ++j)
    for (int64_t r = 0; r < rows; ++r) h[r * hidden + j] = dot(w2 + j * d, z + r * d, d);
  gelu_array(h, a, rows * hidden);
  for (int64_t i = 0; i < d; ++i)  // o, normalised in place below
    for (int64_t r = 0; r < rows; ++r) n[r * d + i] = dot(w1 + i * hidden, a + r * hidden, hidden);
  for (int64_t r = 0; r < rows; ++r) {
    const float* zr = z + r * d;
    float* o = n + r * d;
    float mean = 0;
    for (int64_t i = 0; i < d; ++i) mean += o[i];
    mean /= static_cast<float>(d);
    float var = 0;
    for (int64_t i = 0; i < d; ++i) var += (o[i] - mean) * (o[i] - mean);
    const float sd = std::sqrt(var / static_cast<float>(d) + kLayerNormEps);
    stdev[r] = sd;
    for (int64_t i = 0; i < d; ++i) {
      o[i] = (o[i] - mean) / sd;
      y[r * d + i] = zr[i] + o[i] * ln_weight[i] + ln_bias[i];
    }
  }
}

MEMSCOPE_SIMD_CLONES
void mlp_deltas(const MlpHead& head, const float* __restrict psi, const float* __restrict h,
                const float* __restrict n, float stdev, const float* __restrict w1, float* __restrict delta_o,
                float* __restrict delta_h) {
  const int64_t d = head.d, hidden = head.hidden;
  const float* __restrict ln_weight = head.ln_weight;
  float mean_dn = 0, mean_dn_n = 0;
  for (int64_t i = 0; i < d; ++i) {  // δn = γ_LN·ψ
    const float dn = psi[i] * ln_weight[i];
    mean_dn += dn;
    mean_dn_n += dn * n[i];
  }
  mean_dn /= static_cast<float>(d);
  mean_dn_n /= static_cast<float>(d);
  for (int64_t i = 0; i < d; ++i) delta_o[i] = (psi[i] * ln_weight[i] - mean_dn - n[i] * mean_dn_n) / stdev;
  std::fill_n(delta_h, hidden, 0.0f);
  for (int64_t i = 0; i < d; ++i) {
    const float e = delta_o[i];
    const float* w = w1 + i * hidden;
    for (int64_t j = 0; j < hidden; ++j) delta_h[j] += e * w[j];
  }
  multiply_by_gelu_derivative(h, delta_h, hidden);
}

float mlp_clip_factor(const MlpHead& head, const float* delta_o, const float* a, const float* delta_h,
                      const float* z, double clip) {
  if (clip <= 0) return 1.0f;
  const double norm_sq = squares_of(delta_o, head.d) * squares_of(a, head.hidden) +
                         squares_of(delta_h, head.hidden) * squares_of(z, head.d);
  return static_cast<float>(
      std::min(clip / std::sqrt(std::max(norm_sq, 1e-30)), 1.0));  // inner_clip.cpp's floor
}

MEMSCOPE_SIMD_CLONES
void matvec(const float* __restrict w, const float* __restrict x, int64_t rows, int64_t cols,
            float* __restrict out) {
  for (int64_t i = 0; i < rows; ++i) out[i] = dot(w + i * cols, x, cols);
}

}  // namespace memscope::model
