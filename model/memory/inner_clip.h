// Inner gradient clipping (seed 004, "grad_clip_inner"): each token's g_t is scaled by
// min(1, clip/‖g_t‖_F), the norm taken over all memory weights of one head, so one surprising
// token cannot throw the memory arbitrarily far. Both forms apply the same factor (SPEC §9).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace memscope::model {

// min(1, clip/‖g‖) from the squared norm (any shape); clip = 0 gives ones (no clipping).
at::Tensor clip_factor(const at::Tensor& norm_sq, double clip);

// The factor for gradients whose last two dimensions are each weight's matrix, shaped like
// the gradients without those two dimensions plus [1,1] (ready to multiply).
at::Tensor clip_factor(const std::vector<at::Tensor>& grads, double clip);

}  // namespace memscope::model
