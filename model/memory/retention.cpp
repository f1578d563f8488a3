#include "model/memory/retention.h"

#include <ATen/ATen.h>

namespace memscope::model {

at::Tensor lq_normalize(const at::Tensor& a, double q) {
  at::Tensor norm = at::linalg_vector_norm(a, q, {-2, -1}, /*keepdim=*/true);
  return a / norm.clamp_min(1e-12).pow(q - 2);
}

at::Tensor softmax_rows(const at::Tensor& latent) { return at::softmax(latent, -1); }

at::Tensor softmax_latent(const at::Tensor& m) { return at::log(m.clamp_min(1e-30)); }

}  // namespace memscope::model
