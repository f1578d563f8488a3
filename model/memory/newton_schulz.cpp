#include "model/memory/newton_schulz.h"

namespace memscope::model {

at::Tensor newton_schulz(const at::Tensor& g, const NsSchedule& schedule) {
  TORCH_CHECK(g.dim() >= 2, "newton_schulz: expected a matrix or a batch of matrices, got ",
              g.sizes());
  // SPEC §6: X = G / (‖G‖_F + 1e-7), per matrix of the batch.
  auto norm = at::linalg_vector_norm(g, 2, {-2, -1}, /*keepdim=*/true);
  at::Tensor x = g / (norm + 1e-7);
  const bool transposed = g.size(-2) > g.size(-1);
  if (transposed) x = x.transpose(-2, -1);
  for (int i = 0; i < schedule.iterations(); ++i) {
    const auto& [a, b, c] = schedule.at(i);
    at::Tensor gram = at::matmul(x, x.transpose(-2, -1));
    at::Tensor poly = b * gram + c * at::matmul(gram, gram);
    x = a * x + at::matmul(poly, x);
  }
  if (transposed) x = x.transpose(-2, -1);
  return x.contiguous();
}

}  // namespace memscope::model
