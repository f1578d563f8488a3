#include "model/memory/dgd_preconditioner.h"

#include <ATen/ATen.h>

namespace memscope::model {

at::Tensor window_key_squares(const at::Tensor& window_phi, const at::Tensor& weights) {
  const at::Tensor total = weights.sum(-1, /*keepdim=*/true);
  const at::Tensor share = weights / at::where(total > 0, total, at::ones_like(total));
  return (share.unsqueeze(-1) * window_phi.pow(2)).sum(-2);
}

std::vector<at::Tensor> dgd_mlp_update(const std::vector<at::Tensor>& w, const std::vector<at::Tensor>& grad,
                                       const at::Tensor& k_sq, const at::Tensor& alpha, const at::Tensor& eta) {
  const at::Tensor p = alpha - eta * k_sq;
  const at::Tensor w1 = w[0] * p.unsqueeze(-1) - eta.unsqueeze(-1) * grad[0];  // rows: W_1's output features
  const at::Tensor w2 = w[1] * p.unsqueeze(-2) - eta.unsqueeze(-2) * grad[1];  // columns: W_2's input features
  return {w1, w2};
}

}  // namespace memscope::model
