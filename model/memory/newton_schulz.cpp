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
  // One iteration is three products, each with its scaled sum fused into the GEMM (β·C + α·A·B):
  // B = b·A + c·A², X = a·X + B·X. Batched over every leading dimension as [N,m,m] matrices.
  const auto shape = x.sizes().vec();
  x = x.reshape({-1, x.size(-2), x.size(-1)});
  for (int i = 0; i < schedule.iterations(); ++i) {
    const auto& [a, b, c] = schedule.at(i);
    const at::Tensor gram = at::bmm(x, x.transpose(-2, -1));
    const at::Tensor poly = at::baddbmm(gram, gram, gram, /*beta=*/b, /*alpha=*/c);
    x = at::baddbmm(x, poly, x, /*beta=*/a, /*alpha=*/1.0);
  }
  x = x.reshape(shape);
  if (transposed) x = x.transpose(-2, -1);
  return x.contiguous();
}

}  // namespace memscope::model
