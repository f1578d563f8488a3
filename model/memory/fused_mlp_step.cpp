// The fused sequential step of the MLP memory (issue 20): Titans' deep memory (gd with momentum)
// and Atlas's (an Omega window, polynomial features, Muon), with the l2 bias. The general step
// (sequential_step.cpp) takes g_t = ∇_W L_t by autograd: a graph of ~100 ATen calls a layer and
// token, 0.5–1 ms, for matrices of 16 × 64. Here, per head, the gradient is written out (the
// backward of mlp_memory.h's pass, as mlp_inner_gradient has it):
//   h = W_2 z,  a = GELU(h),  o = W_1 a,  n = (o − mean o)/σ,  y = z + γ_LN·n + β_LN        (SPEC §3)
//   ψ_j = s·γ_j·(y_j − v_j) over the window,  δn = γ_LN·ψ,  δo = (δn − mean δn − n·mean(δn·n))/σ,
//   δh = (W_1ᵀ δo)·GELU'(h),  ∇W_1 = Σ_j δo_j a_jᵀ,  ∇W_2 = Σ_j δh_j z_jᵀ, clipped together   (SPEC §4)
//   gd: S ← β S + η g, W ← α W − S;  Muon: S ← β S + g, W ← α W − η NS(S)                  (SPEC §5, §6)
//   y_t = M(φ_q) with the weights after the write unless the rule reads before it.
// With chunk b > 1 the gradient is taken at the chunk-start weights (SPEC §9, the anchor), as the
// general step does. The result equals step()'s to float32 rounding; tests/model/test_fused_step.cpp
// checks every record field, the state and the output on each rule this path takes.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "model/memory/attentional_bias.h"
#include "model/memory/fused_step_state.h"
#include "model/memory/fused_window.h"
#include "model/memory/memory_layer.h"
#include "model/memory/mlp_head_kernels.h"
#include "model/memory/newton_schulz.h"
#include "model/util/simd_clones.h"

namespace memscope::model {

namespace {

// Adds one input's share of the gradient, from ψ = ∂L/∂y of that input, to g1 = ∇W_1 [d,hidden]
// and g2 = ∇W_2 [hidden,d]. w1 = W_1 [d,hidden]; z, h, a, n, σ: the input's pass. Scratch:
// delta_o [d], delta_h [hidden].
MEMSCOPE_SIMD_CLONES
void mlp_accumulate_gradient(const MlpHead& head, const float* __restrict psi, const float* __restrict z,
                             const float* __restrict h, const float* __restrict a, const float* __restrict n,
                             float stdev, const float* __restrict w1, float* __restrict delta_o,
                             float* __restrict delta_h, float* __restrict g1, float* __restrict g2) {
  const int64_t d = head.d, hidden = head.hidden;
  mlp_deltas(head, psi, h, n, stdev, w1, delta_o, delta_h);
  for (int64_t i = 0; i < d; ++i) {
    const float e = delta_o[i];
    float* g = g1 + i * hidden;
    for (int64_t j = 0; j < hidden; ++j) g[j] += e * a[j];
  }
  for (int64_t j = 0; j < hidden; ++j) {
    const float e = delta_h[j];
    float* g = g2 + j * d;
    for (int64_t k = 0; k < d; ++k) g[k] += e * z[k];
  }
}

// SPEC §5 for one weight of one head: gd with momentum S' = β S + η g, W' = α W − S'; Muon
// S' = β S + g (W' once Newton–Schulz has run over every head). A probed step's `squares` get
// Σ S'² and (gd) Σ (W' − W)², over the block just written, still in this core's L1.
MEMSCOPE_SIMD_CLONES
void update_weight(const float* __restrict w, const float* __restrict s, const float* __restrict g,
                   int64_t size, float alpha, float eta, float beta, bool muon, float* __restrict w_new,
                   float* __restrict s_new, double* squares) {
  if (muon) {
    for (int64_t i = 0; i < size; ++i) s_new[i] = beta * s[i] + g[i];
  } else {
    for (int64_t i = 0; i < size; ++i) {
      s_new[i] = beta * s[i] + eta * g[i];
      w_new[i] = alpha * w[i] - s_new[i];
    }
  }
  if (!squares) return;
  squares[0] = squares_of(s_new, size);
  if (!muon) squares[1] = squares_of_difference(w_new, w, size);
}

// Muon's W' = α W − η O over one head's block of a weight; `squares` (a probed step): Σ (W' − W)².
MEMSCOPE_SIMD_CLONES
void retain_and_step(const float* __restrict w, const float* __restrict orthogonal, int64_t size, float alpha,
                     float eta, float* __restrict w_new, double* squares) {
  for (int64_t i = 0; i < size; ++i) w_new[i] = alpha * w[i] - eta * orthogonal[i];
  if (squares) *squares = squares_of_difference(w_new, w, size);
}

// Σ_j w_j·½‖y_j − v_j‖² over the rows with w_j ≠ 0 (a slot before the sequence start adds nothing).
float window_loss(const float* y, const float* v, const float* weights, int64_t rows, int64_t d) {
  float loss = 0;
  for (int64_t j = 0; j < rows; ++j) {
    if (weights[j] == 0.0f) continue;
    float squares = 0;
    for (int64_t i = 0; i < d; ++i) squares += (y[j * d + i] - v[j * d + i]) * (y[j * d + i] - v[j * d + i]);
    loss += 0.5f * weights[j] * squares;
  }
  return loss;
}

}  // namespace

StepOutput MemoryLayerImpl::fused_mlp_step(const at::Tensor& qkv, const std::vector<float>& alpha,
                                           const std::vector<float>& eta, const std::vector<float>& beta,
                                           MemoryState& state, StepDetail detail, int64_t chunk) const {
  const int64_t B = qkv.size(0), H = heads_, d = head_dim_, W = H * d, c = rule_.window;
  const int64_t hidden = state.memory[0].size(-1), weight_size = d * hidden;
  const bool muon = rule_.optimiser == Optimiser::Muon;
  const bool read_after = rule_.read == ReadOrder::AfterWrite;
  const float scale = static_cast<float>(inner_loss_scale(rule_, head_dim_));
  const float clip = static_cast<float>(rule_.inner_clip);
  const auto options = qkv.options();
  const float* projected = qkv.data_ptr<float>();
  const FusedFeatures features(rule_.feature_map == FeatureMapKind::Poly ? poly_coefficients : at::Tensor());
  FusedWindow window(state, c, d);
  const float* position = position_weights_float_.data();
  const at::Tensor ln_w = ln_weight.to(at::kFloat).contiguous(), ln_b = ln_bias.to(at::kFloat).contiguous();

  const std::vector<at::Tensor> m_old{state.memory[0].contiguous(), state.memory[1].contiguous()};
  const std::vector<at::Tensor> s_old{state.momentum[0].contiguous(), state.momentum[1].contiguous()};
  const bool continuing =
      chunk > 1 && state.tokens % chunk != 0 && state.anchor_chunk == chunk && !state.anchor.empty();
  const std::vector<at::Tensor> gradient_point =
      continuing ? std::vector<at::Tensor>{state.anchor[0].to(at::kFloat).contiguous(),
                                           state.anchor[1].to(at::kFloat).contiguous()}
                 : m_old;
  std::vector<at::Tensor> m_new{at::empty_like(m_old[0]), at::empty_like(m_old[1])};
  std::vector<at::Tensor> s_new{at::empty_like(s_old[0]), at::empty_like(s_old[1])};

  const bool record = detail != StepDetail::OutputOnly, gradients = detail == StepDetail::Record;
  StepRecord rec;
  if (record) {
    rec = allocate_fused_record(B, H, d, c, options,
                                gradients ? WeightShapes{{d, hidden}, {hidden, d}} : WeightShapes{});
    rec.weight_squares.resize(static_cast<size_t>(B * H * 2 * 2));
  }
  const at::Tensor phi_queries = record ? rec.phi_q : at::empty({B, H, d}, options);
  // The window of every head and its weights w_j = s·γ_j, kept for the loss after the write, which
  // Muon knows only once Newton–Schulz has run over all heads.
  std::vector<float> windows_phi(static_cast<size_t>(B * H * c * d)), windows_v(windows_phi.size()),
      windows_weight(static_cast<size_t>(B * H * c));
  // One head's scratch: the window's pass, the backward, g.
  std::vector<float> g1(static_cast<size_t>(weight_size)), g2(g1.size());
  const size_t rows = static_cast<size_t>(std::max<int64_t>(c, 1));  // the window; the read takes one row
  std::vector<float> h(rows * hidden), a(h.size()), n(rows * d), y_rows(n.size()), stdev(rows), psi(d),
      delta_o(d), delta_h(hidden), gammas(c), phi_k(d);
  auto head = [&](int64_t h_index) {
    return MlpHead{d, hidden, ln_w.data_ptr<float>() + h_index * d, ln_b.data_ptr<float>() + h_index * d};
  };

  for (int64_t b = 0; b < B; ++b)
    for (int64_t hh = 0; hh < H; ++hh) {
      const int64_t bh = b * H + hh;
      const size_t at = static_cast<size_t>(bh);
      const MlpHead mlp = head(hh);
      const float* q = projected + b * 3 * W + hh * d;
      float* keys = windows_phi.data() + bh * c * d;
      float* values = windows_v.data() + bh * c * d;
      float* weights = windows_weight.data() + bh * c;
      features(q, phi_queries.data_ptr<float>() + bh * d, d);
      features(q + W, phi_k.data(), d);
      window.gather(bh, phi_k.data(), q + 2 * W, keys, values, gammas.data());
      for (int64_t j = 0; j < c; ++j) {
        weights[j] = gammas[static_cast<size_t>(j)] * position[j] * scale;
        if (record) rec.gamma.data_ptr<float>()[bh * c + j] = gammas[static_cast<size_t>(j)] * position[j];
      }

      // The window's pass and the gradient at the gradient point (the chunk start's, or W).
      const float* w1 = gradient_point[0].data_ptr<float>() + bh * weight_size;
      const float* w2 = gradient_point[1].data_ptr<float>() + bh * weight_size;
      mlp_forward(mlp, keys, c, w1, w2, h.data(), a.data(), n.data(), stdev.data(), y_rows.data());
      const float loss_before = window_loss(y_rows.data(), values, weights, c, d);
      std::fill(g1.begin(), g1.end(), 0.0f);
      std::fill(g2.begin(), g2.end(), 0.0f);
      for (int64_t j = 0; j < c; ++j) {
        if (weights[j] == 0.0f) continue;
        for (int64_t i = 0; i < d; ++i)
          psi[static_cast<size_t>(i)] = weights[j] * (y_rows[j * d + i] - values[j * d + i]);
        mlp_accumulate_gradient(mlp, psi.data(), keys + j * d, h.data() + j * hidden, a.data() + j * hidden,
                                n.data() + j * d, stdev[static_cast<size_t>(j)], w1, delta_o.data(),
                                delta_h.data(), g1.data(), g2.data());
      }
      if (clip > 0) {  // inner_clip.cpp: min(clip / ‖(∇W_1, ∇W_2)‖, 1), both weights together
        float squares = 0;
        for (const float x : g1) squares += x * x;
        for (const float x : g2) squares += x * x;
        const float factor = std::min(clip / std::sqrt(std::max(squares, 1e-30f)), 1.0f);
        for (auto& x : g1) x *= factor;
        for (auto& x : g2) x *= factor;
      }
      if (record) {
        std::copy_n(phi_k.data(), d, rec.phi_k.data_ptr<float>() + bh * d);
        std::copy_n(q + 2 * W, d, rec.v.data_ptr<float>() + bh * d);
        rec.retain.data_ptr<float>()[bh] = alpha[at];
        rec.lr.data_ptr<float>()[bh] = eta[at];
        rec.momentum.data_ptr<float>()[bh] = beta[at];
        rec.loss_before.data_ptr<float>()[bh] = loss_before;
        if (gradients) {
          std::copy(g1.begin(), g1.end(), rec.gradient[0].data_ptr<float>() + bh * weight_size);
          std::copy(g2.begin(), g2.end(), rec.gradient[1].data_ptr<float>() + bh * weight_size);
        }
      }
      for (int w = 0; w < 2; ++w) {
        const int64_t offset = bh * weight_size;
        update_weight(m_old[w].data_ptr<float>() + offset, s_old[w].data_ptr<float>() + offset,
                      (w == 0 ? g1 : g2).data(), weight_size, alpha[at], eta[at], beta[at], muon,
                      m_new[w].data_ptr<float>() + offset, s_new[w].data_ptr<float>() + offset,
                      record ? rec.weight_squares.data() + (bh * 2 + w) * 2 : nullptr);
      }
      window.advance(bh, keys, values, gammas.data());
    }
  if (muon) {
    for (int w = 0; w < 2; ++w) {
      const at::Tensor orthogonal = newton_schulz_small(s_new[w], rule_.ns);
      if (record) {
        rec.ns_input.push_back(s_new[w]);
        rec.ns_output.push_back(orthogonal);
      }
      const float* O = orthogonal.data_ptr<float>();
      const float* M = m_old[w].data_ptr<float>();
      float* M2 = m_new[w].data_ptr<float>();
      for (int64_t bh = 0; bh < B * H; ++bh) {
        const int64_t offset = bh * weight_size;
        const size_t at = static_cast<size_t>(bh);
        retain_and_step(M + offset, O + offset, weight_size, alpha[at], eta[at], M2 + offset,
                        record ? rec.weight_squares.data() + (bh * 2 + w) * 2 + 1 : nullptr);
      }
    }
  }

  // The read y = M(φ_q), from the weights after the write or before it.
  at::Tensor y = at::empty({B, H, d}, options);
  const std::vector<at::Tensor>& read_from = read_after ? m_new : m_old;
  for (int64_t bh = 0; bh < B * H; ++bh) {
    mlp_forward(head(bh % H), phi_queries.data_ptr<float>() + bh * d, 1,
                read_from[0].data_ptr<float>() + bh * weight_size,
                read_from[1].data_ptr<float>() + bh * weight_size, h.data(), a.data(), n.data(), stdev.data(),
                y_rows.data());
    std::copy_n(y_rows.data(), d, y.data_ptr<float>() + bh * d);
  }
  window.commit(state);
  // L_t(M_t), the record's loss after the write (SPEC §8): every head's window, as the step gathered
  // it, through the weights after the write. RecordLater's too, at once: it costs what the step's own
  // pass over the window did (the general step leaves its own, a whole pass more, to the probes'
  // thread). Left to the probes' thread, it read these weights from the other core and slowed the
  // next step by more than it spared it (README "The loss after the write, where the step ran").
  if (record)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      mlp_forward(head(bh % H), windows_phi.data() + bh * c * d, c,
                  m_new[0].data_ptr<float>() + bh * weight_size,
                  m_new[1].data_ptr<float>() + bh * weight_size, h.data(), a.data(), n.data(), stdev.data(),
                  y_rows.data());
      rec.loss_after.data_ptr<float>()[bh] =
          window_loss(y_rows.data(), windows_v.data() + bh * c * d, windows_weight.data() + bh * c, c, d);
    }
  return finish_fused_step(state, m_new, s_new, y, std::move(rec), chunk, gradient_point);
}

}  // namespace memscope::model
