#include "model/nn/rope.h"

#include <torch/torch.h>

namespace memscope::model {

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& positions, double base) {
  const int64_t d = x.size(-1), half = d / 2;
  TORCH_CHECK(d % 2 == 0, "rope: head dimension must be even, got ", d);
  // Angles in float64, so float32 models get the same rotation at position 10 000 as at 10.
  const auto f64 = x.options().dtype(at::kDouble);
  at::Tensor inv_freq = at::pow(base, -at::arange(0, half, f64) * (2.0 / static_cast<double>(d)));
  at::Tensor angles = positions.to(at::kDouble).unsqueeze(-1) * inv_freq;  // [T, d/2]
  at::Tensor cos = angles.cos().to(x.scalar_type()), sin = angles.sin().to(x.scalar_type());
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
}

}  // namespace memscope::model
