#include "app/gui/spectrum.h"

#include <torch/torch.h>

#include <cmath>

namespace memscope::app {

std::vector<float> singular_values(const float* values, int rows, int cols) {
  if (rows <= 0 || cols <= 0) return {};
  for (int i = 0; i < rows * cols; ++i)
    if (!std::isfinite(values[i])) return {};
  // float64 so that tiny singular values of a low-rank memory are not noise.
  const auto m = torch::from_blob(const_cast<float*>(values), {rows, cols}, torch::kFloat32).to(torch::kFloat64);
  const auto s = at::linalg_svdvals(m).to(torch::kFloat32).contiguous();
  return {s.data_ptr<float>(), s.data_ptr<float>() + s.numel()};
}

}  // namespace memscope::app
