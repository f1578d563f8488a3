// dgd for MLP memories (SPEC §5, seed 004 change 2): the linear rule M(αI − η k kᵀ) has no clean
// form for a nonlinear MLP, so HOPE keeps only its diagonal. With per-feature α, η ∈ R^d and
// k_sq = mean over the written tokens of k² (elementwise), the preconditioner is
//     p = α − η ⊙ k_sq ∈ R^d,
// and it scales each weight along its d-sized side (the memory's feature axis):
//     W_2 [4d,d] (input side d):   W_2 ← W_2 ⊙ p[None,:] − η[None,:] ⊙ ∇W_2
//     W_1 [d,4d] (output side d):  W_1 ← W_1 ⊙ p[:,None] − η[:,None] ⊙ ∇W_1
// (seed 004 writes these for w1 [hidden,D] and w2 [D,hidden]: the same two matrices.)
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace memscope::model {

// k̄² of SPEC §5: the mean of φ_i² over the window's positions, weighted by γ_{t,i} renormalised
// to sum 1 over the positions that exist (an empty ring slot has γ = 0). For c = 1 it is φ_t².
// When every weight is 0 (a gated window that prunes every token) it is 0, so p = α.
// window_phi [...,c,d], weights [...,c] → [...,d].
at::Tensor window_key_squares(const at::Tensor& window_phi, const at::Tensor& weights);

// w and grad: {W1 [...,d,4d], W2 [...,4d,d]}; k_sq, alpha, eta: [...,d]. Returns the new {W1, W2}.
std::vector<at::Tensor> dgd_mlp_update(const std::vector<at::Tensor>& w, const std::vector<at::Tensor>& grad,
                                       const at::Tensor& k_sq, const at::Tensor& alpha, const at::Tensor& eta);

}  // namespace memscope::model
