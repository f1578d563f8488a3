#include "model/probe/matrix_metrics.h"

#include <cmath>

namespace memscope::model {

at::Tensor effective_rank(const at::Tensor& m) {
  TORCH_CHECK(m.dim() >= 2, "effective_rank: expected a matrix, got shape ", m.sizes());
  return effective_rank_from_singular_values(at::linalg_svdvals(m));
}

at::Tensor effective_rank_from_singular_values(const at::Tensor& sigma) {
  const at::Tensor total = sigma.sum(-1, /*keepdim=*/true);
  const at::Tensor p = sigma / total.clamp_min(std::numeric_limits<double>::min());
  // 0 · log 0 = 0: zero singular values add nothing to the entropy.
  const at::Tensor entropy = -at::where(p > 0, p * at::log(p.clamp_min(1e-300)), at::zeros_like(p)).sum(-1);
  return at::where(total.squeeze(-1) > 0, at::exp(entropy), at::zeros_like(entropy));
}

OrthogonalityError orthogonality_error(const at::Tensor& u) {
  TORCH_CHECK(u.dim() >= 2, "orthogonality_error: expected a matrix, got shape ", u.sizes());
  const bool wide = u.size(-1) > u.size(-2);
  const int64_t r = std::min(u.size(-2), u.size(-1));
  const at::Tensor ut = u.transpose(-2, -1);
  const at::Tensor gram = wide ? at::matmul(u, ut) : at::matmul(ut, u);  // r × r
  const at::Tensor eye = at::eye(r, u.options());
  OrthogonalityError out;
  out.error = at::linalg_vector_norm(gram - eye, 2, {-2, -1}, false) / std::sqrt(static_cast<double>(r));
  const at::Tensor sigma = at::linalg_svdvals(u);  // descending, r values
  out.sigma_max = sigma.select(-1, 0);
  out.sigma_min = sigma.select(-1, r - 1);
  return out;
}

OrthogonalityError orthogonality_error_from_singular_values(const at::Tensor& sigma) {
  const int64_t r = sigma.size(-1);
  OrthogonalityError out;
  out.error = (sigma * sigma - 1.0).pow(2).sum(-1).sqrt() / std::sqrt(static_cast<double>(r));
  out.sigma_max = sigma.select(-1, 0);
  out.sigma_min = sigma.select(-1, r - 1);
  return out;
}

}  // namespace memscope::model
