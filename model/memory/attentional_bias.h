// The attentional bias ℓ(y, v) of SPEC §4 (the inner loss per window token) and ∂ℓ/∂y.
#pragma once
#include <ATen/core/Tensor.h>

#include "model/memory/memory_rule.h"

namespace memscope::model {

// ℓ(y, v) per token: y and v are [..., d_v]; returns [...]. `delta` (Huber δ_t) broadcasts to [...].
at::Tensor bias_loss(const at::Tensor& y, const at::Tensor& v, const MemoryRule& rule, const at::Tensor& delta);

// ∂ℓ/∂y, shaped like y. For `lp` this is SPEC §4's smoothed form p·tanh(10e)·|e|_ε^{p−1}, which
// is not the exact derivative of bias_loss near e = 0 (SPEC's "smooth sign").
at::Tensor bias_grad(const at::Tensor& y, const at::Tensor& v, const MemoryRule& rule, const at::Tensor& delta);

// What `memory.inner.normalize` multiplies the inner loss L_t and its gradient by: 1/d_v (the
// mean over ℓ's d_v elements, seed 004 change 6), else 1. It scales nothing else: not the window
// weights γ the probes record, nor the dgd preconditioner (SPEC §4, §5).
inline double inner_loss_scale(const MemoryRule& rule, int64_t d_v) {
  return rule.inner_normalize ? 1.0 / static_cast<double>(d_v) : 1.0;
}

}  // namespace memscope::model
