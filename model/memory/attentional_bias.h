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

}  // namespace memscope::model
