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
  at::Tensor n;  // (o − mean)/stdev [..., d]: LN before its affine
  at::Tensor stdev;  // √(var(o) + eps) [..., 1]
  at::Tensor y;  // z + LN(o)       [..., d]
};

// z: [B,H,…,d]; w1: [B,H,…,d,4d] and w2: [B,H,…,4d,d] broadcast against z's token dimension
// (z's last-but-one dimension is the token axis of the matmul); ln_weight, ln_bias: [H,d].
MlpPass mlp_pass(const at::Tensor& z, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& ln_weight,
                 const at::Tensor& ln_bias);

// Tokens [start, start + length) of a pass over several inputs' rows (every field narrowed on the
// token axis): a caller that reads one memory at two sets of inputs makes it one pass, one product
// per weight instead of two (and, in training, one weight-sized gradient per weight instead of two).
MlpPass pass_rows(const MlpPass& pass, int64_t start, int64_t length);

// The pass's LN and residual from its pre-LN output p.o: fills p.n, p.stdev and p.y. For a
// caller that gets o another way (the chunkwise self-modifying memory reads W_1 a without W_1).
void finish_mlp_pass(MlpPass& p, const at::Tensor& z, const at::Tensor& ln_weight, const at::Tensor& ln_bias);

// GELU (exact, erf), its derivative Φ(h) + h·φ(h), and g·GELU'(h), the step of a backward through
// it: written out, and on the CPU in float32 as autograd functions over vectorised loops
// (exact_gelu.cpp says why and how). exact_gelu_derivative is the ATen form only, the reference.
at::Tensor exact_gelu(const at::Tensor& h);
at::Tensor exact_gelu_derivative(const at::Tensor& h);
at::Tensor gelu_derivative_times(const at::Tensor& g, const at::Tensor& h);

// Back through one pass from ∂ℓ/∂y (any inner loss): δo = ∂ℓ/∂o and δh = ∂ℓ/∂h.
struct MlpBackward {
  at::Tensor delta_o;  // [..., d]
  at::Tensor delta_h;  // [..., 4d]
};
MlpBackward mlp_backward(const MlpPass& pass, const at::Tensor& dy, const at::Tensor& w1, const at::Tensor& ln_weight);

// The inner loss ℓ = ½‖M(z) − target‖²/d of one token and its gradient, analytically. For one
// input z the gradient of each weight is rank 1: ∇_{W_1} ℓ = δo ⊗ a and ∇_{W_2} ℓ = δh ⊗ z, so the
// factors are all a batched form needs. Plain tensor ops: with grad mode on, autograd carries the
// outer gradient through them (no double backward), as create_graph would through autograd::grad.
struct MlpInnerGradient {
  at::Tensor delta_o;  // ∂ℓ/∂o [..., d]
  at::Tensor delta_h;  // ∂ℓ/∂h [..., 4d]
  at::Tensor loss;     // ℓ     [...]
};
MlpInnerGradient mlp_inner_gradient(const MlpPass& pass, const at::Tensor& target, const at::Tensor& w1,
                                    const at::Tensor& ln_weight);

// The weights a per-token inner gradient ∇_W ℓ is taken with respect to (autograd::grad inputs).
// Differentiable (training, create_graph): a fresh alias of each weight, so that the gradient
// counts only W's use as the memory that ℓ reads, never a path through a key or value that W
// also produced (a nested CMS level reads the output of a level restarted from its weights; M_k
// writes at its own key). With the weights themselves as inputs, autograd would add those paths
// and training would write differently from inference. Otherwise, and for a weight that does not
// require grad (a state carried across a truncated-BPTT segment): detached copies.
std::vector<at::Tensor> inner_gradient_inputs(const std::vector<at::Tensor>& weights, bool differentiable);

}  // namespace memscope::model
