// The MLP memory of SPEC §3: M(z) = z + LN(W_1 GELU(W_2 z)), depth 2, hidden 4·d. W_1, W_2 are
// the inner (test-time) weights; LN's affine parameters are outer.
#pragma once
#include <ATen/core/Tensor.h>

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

}  // namespace memscope::model
