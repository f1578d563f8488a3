#include "model/memory/linear_dual_form.h"

#include <ATen/ATen.h>

#include "model/memory/attentional_bias.h"
#include "model/memory/inner_clip.h"
#include "model/memory/small_matmul.h"
#include "model/memory/state_update.h"

namespace memscope::model {

namespace {

// [B,H] → [B,H,1,1]: one scale per head's matrix.
at::Tensor matrix_scale(const at::Tensor& gate) { return gate.unsqueeze(-1).unsqueeze(-1); }

}  // namespace

at::Tensor repeat_each(const at::Tensor& t, int64_t c) {
  if (c == 1) return t;
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes.push_back(c);
  return t.unsqueeze(-1).expand(sizes).flatten(-2);
}

at::Tensor token_windows(const at::Tensor& ext, int64_t c) {
  // At c = 1 each window is its token: the same view without unfold, whose backward scatters into
  // a zero-filled copy of the whole input.
  if (c == 1) return ext.unsqueeze(3);
  at::Tensor w = ext.unfold(2, c, 1);  // [B,H,m,…,c]
  return ext.dim() == 3 ? w : w.movedim(-1, 3);
}

DualCoefficients dual_coefficients(const MemoryRule& rule, const at::Tensor& alpha, const at::Tensor& eta,
                                   const at::Tensor& beta) {
  const int64_t n = alpha.size(-1), c = rule.window;
  DualCoefficients d;
  d.retain = decay_products(alpha);
  d.has_momentum = rule.optimiser == Optimiser::GdMomentum;
  at::Tensor k = d.retain.within;
  if (d.has_momentum) {  // without momentum, s and momentum stay undefined: nothing reads them
    d.beta = decay_products(beta);
    k = small_matmul(d.retain.within, d.beta.within);
    d.s = small_matmul(d.retain.within, d.beta.from_start.unsqueeze(-1)).squeeze(-1);
    d.momentum = d.s;
  }
  d.coef = repeat_each(k * eta.unsqueeze(-2), c);  // [B,H,n,n·c]: one column per window slot
  d.start = d.retain.from_start;
  d.row = d.coef;
  if (rule.read == ReadOrder::BeforeWrite) {  // y_t = M_{t−1} q_t: coefficients of row t−1
    d.start = at::cat({at::ones_like(d.start.slice(-1, 0, 1)), d.start.slice(-1, 0, n - 1)}, -1);
    if (d.has_momentum)
      d.momentum = at::cat({at::zeros_like(d.s.slice(-1, 0, 1)), d.s.slice(-1, 0, n - 1)}, -1);
    d.row = at::cat({at::zeros_like(d.coef.slice(-2, 0, 1)), d.coef.slice(-2, 0, n - 1)}, -2);
  }
  return d;
}

EndCoefficients end_coefficients(const MemoryRule& rule, const DualCoefficients& k, const at::Tensor& eta) {
  const int64_t n = eta.size(-1);
  EndCoefficients e;
  e.has_momentum = k.has_momentum;
  e.last = k.coef.select(-2, n - 1).unsqueeze(-1);
  e.last_start = k.retain.from_start.select(-1, n - 1);
  if (k.has_momentum) {
    e.last_momentum = k.s.select(-1, n - 1);  // the unshifted row: the end state is after the last write
    e.s_weights = repeat_each(k.beta.within.select(-2, n - 1) * eta, rule.window).unsqueeze(-1);
    e.beta_last = k.beta.from_start.select(-1, n - 1);
  }
  return e;
}

at::Tensor linear_window_psi(const MemoryRule& rule, const at::Tensor& m, const at::Tensor& win_phi,
                             const at::Tensor& win_v, const at::Tensor& loss_weights,
                             const at::Tensor& win_delta, const at::Tensor& phi_gram) {
  // One [n·c, d_φ] × [d_φ, d_v] product per head rather than n broadcast copies of M.
  auto sizes = win_phi.sizes().vec();
  const at::Tensor y = small_matmul(win_phi.flatten(2, 3), m.transpose(-1, -2));
  sizes.back() = m.size(-2);
  at::Tensor psi = bias_grad(y.view(sizes), win_v, rule, win_delta) * loss_weights.unsqueeze(-1);
  if (rule.inner_clip > 0.0) {
    // ‖Σ_j ψ_j φ_jᵀ‖_F² = Σ_{j,k} (ψ_j·ψ_k)(φ_j·φ_k): g_t's norm without materialising g_t.
    const at::Tensor gram = phi_gram.defined() ? phi_gram : small_matmul(win_phi, win_phi.transpose(-1, -2));
    const at::Tensor norm_sq = (small_matmul(psi, psi.transpose(-1, -2)) * gram).sum({-2, -1});
    psi = psi * clip_factor(norm_sq, rule.inner_clip).unsqueeze(-1).unsqueeze(-1);
  }
  return psi;
}

at::Tensor dual_read(const DualCoefficients& k, const at::Tensor& q, const at::Tensor& phi,
                     const at::Tensor& psi, const at::Tensor& m0, const at::Tensor& s0) {
  at::Tensor y = k.start.unsqueeze(-1) * small_matmul(q, m0.transpose(-1, -2)) -
                 small_matmul(k.row * small_matmul(q, phi.transpose(-1, -2)), psi);
  if (k.has_momentum) y = y - k.momentum.unsqueeze(-1) * small_matmul(q, s0.transpose(-1, -2));
  return y;
}

DualEnd dual_end_state(const EndCoefficients& e, const at::Tensor& phi, const at::Tensor& psi,
                       const at::Tensor& m0, const at::Tensor& s0) {
  DualEnd end;
  // Each update one pass per matrix where state_update.h's loops apply, gd-momentum's two in one
  // function. The checks read shapes only: −last_momentum and −(ψ·last) are made once one holds, so
  // the ATen form (a GPU's) launches nothing more.
  if (e.has_momentum &&
      momentum_end_applies({e.last_start, m0, e.last_momentum, s0, psi, e.beta_last, psi, phi})) {
    const MomentumEnd both = momentum_end_update(
        {e.last_start, m0, -e.last_momentum, s0, -(psi * e.last), e.beta_last, psi * e.s_weights, phi});
    return {both.memory, both.momentum, both.start};
  }
  end.momentum_start = s0;
  if (!e.has_momentum && state_update_applies(e.last_start, m0, {}, {}, psi, phi)) {
    end.memory = state_update(e.last_start, m0, {}, {}, -(psi * e.last), phi);
    return end;
  }
  end.memory = matrix_scale(e.last_start) * m0 - small_matmul((psi * e.last).transpose(-1, -2), phi);
  if (e.has_momentum) {
    end.memory = end.memory - matrix_scale(e.last_momentum) * s0;
    end.momentum = matrix_scale(e.beta_last) * s0 + small_matmul((psi * e.s_weights).transpose(-1, -2), phi);
  }
  return end;
}

}  // namespace memscope::model
