#include "model/nn/rope.h"

#include <torch/torch.h>

namespace memscope::model {

RopeAngles rope_angles(const at::Tensor& positions, int64_t d, double base, at::ScalarType dtype) {
  TORCH_CHECK(d % 2 == 0, "rope: head dimension must be even, got ", d);
  const int64_t half = d / 2;
  // Angles in float64, so float32 models get the same rotation at position 10 000 as at 10.
  const auto f64 = positions.options().dtype(at::kDouble);
  at::Tensor inv_freq = at::pow(base, -at::arange(0, half, f64) * (2.0 / static_cast<double>(d)));
  at::Tensor angles = positions.to(at::kDouble).unsqueeze(-1) * inv_freq;  // [T, d/2]
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeAngles& angles) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * angles.cos - x2 * angles.sin, x1 * angles.sin + x2 * angles.cos}, -1);
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& positions, double base) {
  return apply_rope(x, rope_angles(positions, x.size(-1), base, x.scalar_type()));
}

}  // namespace memscope::model
