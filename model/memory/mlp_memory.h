// The MLP memory of SPEC §3: M(z) = z + LN(W_1 GELU(W_2 z)), depth 2, hidden 4·d. W_1, W_2 are
// the inner (test-time) weights; LN's affine parameters are outer.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace memscope::model {

// The forward pass with its intermediates, which the chunkwise form back-propagates through
// to get per-token gradients (∂ℓ/∂h, ∂ℓ/∂o) in one autograd call.
struct MlpPass {
  at::Tensor h;  // W_2 z           [..., 4d]
  at::Tensor a;  // GELU(h)         [..., 4d]
  at::Tensor o;  // W_1 a           [..., d]
  at::Tensor y;  // z + LN(o)       [..., d]
};

// z: [B,H,…,d]; w1: [B,H,…,d,4d] and w2: [B,H,…,4d,d] broadcast against z's token dimension
// (z's last-but-one dimension is the token axis of the matmul); ln_weight, ln_bias: [H,d].
MlpPass mlp_pass(const at::Tensor& z, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& ln_weight,
                 const at::Tensor& ln_bias);

// The weights a per-token inner gradient ∇_W ℓ is taken with respect to (autograd::grad inputs).
// Differentiable (training, create_graph): a fresh alias of each weight, so that the gradient
// counts only W's use as the memory that ℓ reads, never a path through a key or value that W
// also produced (a nested CMS level reads the output of a level restarted from its weights; M_k
// writes at its own key). With the weights themselves as inputs, autograd would add those paths
// and training would write differently from inference. Otherwise: detached copies.
std::vector<at::Tensor> inner_gradient_inputs(const std::vector<at::Tensor>& weights, bool differentiable);

}  // namespace memscope::model
