// The one-token attention step, fused (issue 20). Stepping a small model token by token is bound
// by the number of ATen calls (each allocates and dispatches), not by FLOPs: forward() on one token
// makes about forty. This computes the same thing (sliding_window_attention.cpp) with one matmul
// for q, k and v, one for W_o, and a loop per head over at most window + persistent keys.
// tests/model/test_language_model.cpp checks it against forward()'s general path.
#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "model/nn/sliding_window_attention.h"
#include "model/util/cpu_kernels.h"
#include "model/util/weight_key.h"

namespace memscope::model {

bool SlidingWindowAttentionImpl::fused_step_applies(const at::Tensor& x, const KvCache& cache,
                                                    const at::Tensor& extra) const {
  return x.dim() == 3 && x.size(1) == 1 && !extra.defined() && options_.segment == 0 &&
         !at::GradMode::is_enabled() && cpu_kernels_on(x.device()) && x.scalar_type() == at::kFloat &&
         w_q.scalar_type() == at::kFloat && cache.k.scalar_type() == at::kFloat;
}

void SlidingWindowAttentionImpl::refresh_fused_weights() const {
  if (!weights_changed(fused_key_, std::array<const at::Tensor*, 4>{&w_q, &w_k, &w_v, &persistent_tokens})) return;
  fused_qkv_ = at::cat({w_q, w_k, w_v}, 0).t().contiguous();  // [D, 3D]
  if (persistent_tokens.defined()) {  // no position: the same keys and values at every step
    persistent_keys_ = at::matmul(persistent_tokens, w_k.t()).contiguous();    // [P, D]
    persistent_values_ = at::matmul(persistent_tokens, w_v.t()).contiguous();  // [P, D]
  }
}

at::Tensor SlidingWindowAttentionImpl::fused_step(const at::Tensor& x, KvCache& cache) const {
  refresh_fused_weights();
  const int64_t B = x.size(0), D = options_.d_model, H = options_.heads, d = head_dim_, half = d / 2;
  const int64_t P = persistent_tokens.defined() ? options_.persistent : 0;
  const at::Tensor qkv = at::mm(x.reshape({B, D}).contiguous(), fused_qkv_);  // [B, 3D]
  const at::Tensor old_k = cache.k.contiguous(), old_v = cache.v.contiguous();
  const at::Tensor old_positions = cache.positions.contiguous();
  const int64_t old = old_k.size(2), next = cache.next;
  // A padded cache (graphed_step.h) starts with keys at negative positions, which no query sees:
  // they are skipped, so the arithmetic is that of the cache without them, bit for bit.
  int64_t padding = 0;
  while (padding < old && old_positions.data_ptr<int64_t>()[padding] < 0) ++padding;

  // RoPE at this position, as rope_angles(): angles in float64, then rounded to float.
  std::vector<float> cos_of(static_cast<size_t>(half)), sin_of(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(next) * std::pow(options_.rope_base, -static_cast<double>(i) * (2.0 / static_cast<double>(d)));
    cos_of[static_cast<size_t>(i)] = static_cast<float>(std::cos(angle));
    sin_of[static_cast<size_t>(i)] = static_cast<float>(std::sin(angle));
  }
  auto rotate = [&](const float* in, float* out) {
    for (int64_t i = 0; i < half; ++i) {
      const float a = in[i], b = in[i + half], c = cos_of[static_cast<size_t>(i)], s = sin_of[static_cast<size_t>(i)];
      out[i] = a * c - b * s;
      out[i + half] = a * s + b * c;
    }
  };

  // What stays in the cache: the last W−1 keys of the old ones and this one (forward()'s slice).
  const int64_t keep = std::min<int64_t>(old + 1, options_.window - 1), from = old + 1 - keep;
  const auto options = x.options();
  at::Tensor new_k = at::empty({B, H, keep, d}, options), new_v = at::empty({B, H, keep, d}, options);
  at::Tensor mixed = at::empty({B, D}, options);
  const float* projected = qkv.data_ptr<float>();
  const float* pk = P > 0 ? persistent_keys_.data_ptr<float>() : nullptr;
  const float* pv = P > 0 ? persistent_values_.data_ptr<float>() : nullptr;
  const float inv_sqrt_d = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<float> q(static_cast<size_t>(d)), k(static_cast<size_t>(d)), weights(static_cast<size_t>(P + old + 1));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const float* row = projected + b * 3 * D + h * d;
      rotate(row, q.data());
      rotate(row + D, k.data());
      const float* v = row + 2 * D;
      const float* cached_k = old_k.data_ptr<float>() + (b * H + h) * old * d;
      const float* cached_v = old_v.data_ptr<float>() + (b * H + h) * old * d;
      // Keys in forward()'s order: persistent tokens, the cache (oldest first), this token.
      auto key = [&](int64_t j) { return j < P ? pk + j * D + h * d : j < P + old ? cached_k + (j - P) * d : k.data(); };
      auto value = [&](int64_t j) { return j < P ? pv + j * D + h * d : j < P + old ? cached_v + (j - P) * d : v; };
      const int64_t n = P + old + 1;
      auto padded = [&](int64_t j) { return j >= P && j < P + padding; };
      float largest = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        if (padded(j)) continue;
        const float* kj = key(j);
        float dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += q[static_cast<size_t>(i)] * kj[i];
        weights[static_cast<size_t>(j)] = dot * inv_sqrt_d;
        largest = std::max(largest, weights[static_cast<size_t>(j)]);
      }
      float total = 0;
      for (int64_t j = 0; j < n; ++j)
        if (!padded(j)) total += (weights[static_cast<size_t>(j)] = std::exp(weights[static_cast<size_t>(j)] - largest));
      float* out = mixed.data_ptr<float>() + b * D + h * d;
      std::fill(out, out + d, 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        if (padded(j)) continue;
        const float w = weights[static_cast<size_t>(j)] / total;
        const float* vj = value(j);
        for (int64_t i = 0; i < d; ++i) out[i] += w * vj[i];
      }
      float* kept_k = new_k.data_ptr<float>() + (b * H + h) * keep * d;
      float* kept_v = new_v.data_ptr<float>() + (b * H + h) * keep * d;
      for (int64_t r = 0; r < keep; ++r) {
        const int64_t j = P + from + r;  // in the key order above
        std::copy(key(j), key(j) + d, kept_k + r * d);
        std::copy(value(j), value(j) + d, kept_v + r * d);
      }
    }
  at::Tensor positions = at::empty({keep}, old_positions.options());
  for (int64_t r = 0; r < keep; ++r)
    positions.data_ptr<int64_t>()[r] = from + r < old ? old_positions.data_ptr<int64_t>()[from + r] : next;
  cache.k = new_k;
  cache.v = new_v;
  cache.positions = positions;
  cache.next = next + 1;
  return at::mm(mixed, w_o.t()).view({B, 1, D});
}

}  // namespace memscope::model
