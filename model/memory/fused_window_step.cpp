// The fused sequential step for Atlas's rules (issue 20): an Omega window of c tokens, polynomial
// features and Muon, on a linear memory with the l2 bias. fused_step (fused_linear_step.cpp) has
// projected q, k, v and the gates; here, per head, in the order sequential_step.cpp computes them:
//   φ = Σ a_i ẑ^i with ẑ = z/max(‖z‖, 1e-12)                              (SPEC §2; identity: ẑ)
//   g = Σ_{j in window} s·γ_j·(M φ_j − v_j) φ_jᵀ, clipped to memory.inner.clip     (SPEC §4)
//   Muon: S ← β S + g, M ← α M − η NS(S);  gd: S ← β S + η g, M ← α M − S          (SPEC §5, §6)
//   y = M φ_q, with the memory after the write unless the rule reads before it.
// With chunk b > 1 the gradient is taken at the chunk-start memory (SPEC §9, the anchor), as
// sequential_step.cpp does; momentum, retention and the read use the current memory.
// Newton–Schulz runs through newton_schulz_small(), a plain loop per head equal to the general
// step's newton_schulz() up to float rounding (at d = 16 the ATen calls were most of the cost).
// The window's older tokens live in the state's ring (fused_window.h).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/memory/attentional_bias.h"
#include "model/memory/fused_step_state.h"
#include "model/memory/fused_window.h"
#include "model/memory/memory_layer.h"
#include "model/memory/newton_schulz.h"

namespace memscope::model {

StepOutput MemoryLayerImpl::fused_window_step(const at::Tensor& qkv, const std::vector<float>& alpha,
                                              const std::vector<float>& eta, const std::vector<float>& beta,
                                              MemoryState& state, StepDetail detail, int64_t chunk) const {
  const int64_t B = qkv.size(0), H = heads_, d = head_dim_, W = H * d, c = rule_.window;
  const bool muon = rule_.optimiser == Optimiser::Muon;
  const float scale = static_cast<float>(inner_loss_scale(rule_, head_dim_));
  const float clip = static_cast<float>(rule_.inner_clip);
  const auto options = qkv.options();
  const float* projected = qkv.data_ptr<float>();

  const FusedFeatures features(rule_.feature_map == FeatureMapKind::Poly ? poly_coefficients : at::Tensor());
  FusedWindow window(state, c, d);
  // The window's weights γ_j = (token gate γ, 1 without a gate) × the position weight, times s.
  const float* position = position_weights_float_.data();

  const at::Tensor m_old = state.memory[0].contiguous();
  const at::Tensor s_old = state.momentum[0].contiguous();
  const bool continuing = chunk > 1 && state.tokens % chunk != 0 && state.anchor_chunk == chunk && !state.anchor.empty();
  const at::Tensor gradient_point = continuing ? state.anchor[0].to(at::kFloat).contiguous() : m_old;
  at::Tensor m_new = at::empty_like(m_old), s_new = at::empty_like(s_old);
  std::vector<float> keys(static_cast<size_t>(c * d)), values(static_cast<size_t>(c * d)), gammas(static_cast<size_t>(c));
  std::vector<float> g(static_cast<size_t>(d * d)), error(static_cast<size_t>(d)),
      phi_k(static_cast<size_t>(d));
  // A probed step's record; the window of every head is kept for the loss after the write, which
  // Muon knows only once Newton–Schulz has run over all heads.
  const bool record = detail != StepDetail::OutputOnly, gradients = detail == StepDetail::Record;
  StepRecord rec;
  std::vector<float> windows_phi, windows_v;
  if (record) {
    rec = allocate_fused_record(B, H, d, c, options, gradients ? WeightShapes{{d, d}} : WeightShapes{});
    windows_phi.resize(static_cast<size_t>(B * H * c * d));
    windows_v.resize(windows_phi.size());
    rec.weight_squares.resize(static_cast<size_t>(B * H * 2));  // [B,H,1 weight,2]
  }
  // φ(q) of every head: the record's own piece when there is a record.
  const at::Tensor phi_queries = record ? rec.phi_q : at::empty({B, H, d}, options);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bh = b * H + h;
      const float* q = projected + b * 3 * W + h * d;
      features(q, phi_queries.data_ptr<float>() + bh * d, d);
      features(q + W, phi_k.data(), d);
      window.gather(bh, phi_k.data(), q + 2 * W, keys.data(), values.data(), gammas.data());

      const float* M = m_old.data_ptr<float>() + bh * d * d;
      const float* S = s_old.data_ptr<float>() + bh * d * d;
      const float* at_point = gradient_point.data_ptr<float>() + bh * d * d;  // M, or the chunk start's
      std::fill(g.begin(), g.end(), 0.0f);
      float loss_before = 0;  // L_t = Σ_j w_j·½‖M φ_j − v_j‖² at the gradient point, w_j = s·γ_j
      for (int64_t j = 0; j < c; ++j) {
        const float weight = gammas[static_cast<size_t>(j)] * position[j] * scale;
        if (record) rec.gamma.data_ptr<float>()[bh * c + j] = gammas[static_cast<size_t>(j)] * position[j];
        if (weight == 0.0f) continue;  // a slot before the sequence start
        const float* phi = keys.data() + j * d;
        const float* v = values.data() + j * d;
        float squares = 0;
        for (int64_t r = 0; r < d; ++r) {
          float predicted = 0;
          for (int64_t k = 0; k < d; ++k) predicted += at_point[r * d + k] * phi[k];
          error[static_cast<size_t>(r)] = (predicted - v[r]) * weight;
          squares += (predicted - v[r]) * (predicted - v[r]);
        }
        loss_before += 0.5f * weight * squares;
        for (int64_t r = 0; r < d; ++r)
          for (int64_t k = 0; k < d; ++k) g[static_cast<size_t>(r * d + k)] += error[static_cast<size_t>(r)] * phi[k];
      }
      if (clip > 0) {  // inner_clip.cpp: min(clip / ‖g‖_F, 1)
        float squares = 0;
        for (const float x : g) squares += x * x;
        const float factor = std::min(clip / std::sqrt(std::max(squares, 1e-30f)), 1.0f);
        for (auto& x : g) x *= factor;
      }
      const size_t at = static_cast<size_t>(bh);
      if (record) {
        std::copy(keys.end() - d, keys.end(), rec.phi_k.data_ptr<float>() + bh * d);
        std::copy(values.end() - d, values.end(), rec.v.data_ptr<float>() + bh * d);
        std::copy(keys.begin(), keys.end(), windows_phi.begin() + bh * c * d);
        std::copy(values.begin(), values.end(), windows_v.begin() + bh * c * d);
        rec.retain.data_ptr<float>()[bh] = alpha[at];
        rec.lr.data_ptr<float>()[bh] = eta[at];
        rec.momentum.data_ptr<float>()[bh] = beta[at];
        rec.loss_before.data_ptr<float>()[bh] = loss_before;
        if (gradients) std::copy(g.begin(), g.end(), rec.gradient[0].data_ptr<float>() + bh * d * d);
      }
      float* S2 = s_new.data_ptr<float>() + bh * d * d;
      float* M2 = m_new.data_ptr<float>() + bh * d * d;
      for (int64_t i = 0; i < d * d; ++i) {
        if (muon) {
          S2[i] = beta[at] * S[i] + g[static_cast<size_t>(i)];
        } else {
          S2[i] = beta[at] * S[i] + eta[at] * g[static_cast<size_t>(i)];
          M2[i] = alpha[at] * M[i] - S2[i];
        }
      }
      window.advance(bh, keys.data(), values.data(), gammas.data());
    }
  if (muon) {
    const at::Tensor orthogonal = newton_schulz_small(s_new, rule_.ns);
    if (record) rec.ns_output = {orthogonal};
    const float* O = orthogonal.data_ptr<float>();
    const float* M = m_old.data_ptr<float>();
    float* M2 = m_new.data_ptr<float>();
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t i = 0; i < d * d; ++i)
        M2[bh * d * d + i] = alpha[static_cast<size_t>(bh)] * M[bh * d * d + i] -
                             eta[static_cast<size_t>(bh)] * O[bh * d * d + i];
  }

  // The read: y = M φ_q from the memory after the write, or before it.
  const at::Tensor& read_from = rule_.read == ReadOrder::AfterWrite ? m_new : m_old;
  at::Tensor y = at::empty({B, H, d}, options);
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const float* M = read_from.data_ptr<float>() + bh * d * d;
    const float* phi = phi_queries.data_ptr<float>() + bh * d;
    for (int64_t r = 0; r < d; ++r) {
      float sum = 0;
      for (int64_t k = 0; k < d; ++k) sum += M[r * d + k] * phi[k];
      y.data_ptr<float>()[bh * d + r] = sum;
    }
  }
  if (record)  // the loss after the write, over the same window; Σ S_t², Σ (M_t − M_{t−1})²
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const float* M = m_new.data_ptr<float>() + bh * d * d;
      rec.weight_squares[static_cast<size_t>(bh * 2)] =
          squares_of(s_new.data_ptr<float>() + bh * d * d, d * d);
      rec.weight_squares[static_cast<size_t>(bh * 2 + 1)] =
          squares_of_difference(M, m_old.data_ptr<float>() + bh * d * d, d * d);
      float loss_after = 0;
      for (int64_t j = 0; j < c; ++j) {
        const float weight = rec.gamma.data_ptr<float>()[bh * c + j] * scale;  // as above: γ_j·s
        if (weight == 0.0f) continue;
        const float* phi = windows_phi.data() + (bh * c + j) * d;
        const float* v = windows_v.data() + (bh * c + j) * d;
        float squares = 0;
        for (int64_t r = 0; r < d; ++r) {
          float predicted = 0;
          for (int64_t k = 0; k < d; ++k) predicted += M[r * d + k] * phi[k];
          squares += (predicted - v[r]) * (predicted - v[r]);
        }
        loss_after += 0.5f * weight * squares;
      }
      rec.loss_after.data_ptr<float>()[bh] = loss_after;
    }
  window.commit(state);
  return finish_fused_step(state, {m_new}, {s_new}, y, std::move(rec), chunk, {gradient_point});
}

}  // namespace memscope::model
