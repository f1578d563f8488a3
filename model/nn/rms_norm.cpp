#include "model/nn/rms_norm.h"

#include <cmath>

#include "model/util/cpu_kernels.h"

namespace memscope::model {

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

at::Tensor RmsNormImpl::forward(const at::Tensor& x) const {
  // Without autograd on the CPU in float32 (a debugger's token step), one pass per row: the five
  // ATen calls below were a fifth of demo-mqar's step at one token (issue 20).
  if (!at::GradMode::is_enabled() && cpu_kernels_on(x.device()) && x.scalar_type() == at::kFloat &&
      weight.scalar_type() == at::kFloat && x.size(-1) == weight.size(0)) {
    const at::Tensor in = x.contiguous();
    at::Tensor out = at::empty_like(in);
    const int64_t dim = in.size(-1), rows = dim == 0 ? 0 : in.numel() / dim;
    const float* w = weight.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = in.data_ptr<float>() + r * dim;
      float* y = out.data_ptr<float>() + r * dim;
      double squares = 0;
      for (int64_t i = 0; i < dim; ++i) squares += static_cast<double>(row[i]) * row[i];
      const float scale = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(dim) + eps_));
      for (int64_t i = 0; i < dim; ++i) y[i] = row[i] * scale * w[i];
    }
    return out;
  }
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps_) * weight;
}

}  // namespace memscope::model
