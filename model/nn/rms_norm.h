// RMSNorm: x / rms(x) · w over the last dimension (no mean subtraction, no bias).
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace memscope::model {

class RmsNormImpl : public torch::nn::Module {
 public:
  explicit RmsNormImpl(int64_t dim, double eps = 1e-6);
  at::Tensor forward(const at::Tensor& x) const;

  at::Tensor weight;  // [dim], starts at 1

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

}  // namespace memscope::model
