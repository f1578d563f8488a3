// The SwiGLU feed-forward: W_down (SiLU(W_gate x) ⊙ W_up x).
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace memscope::model {

class SwiGluImpl : public torch::nn::Module {
 public:
  SwiGluImpl(int64_t dim, int64_t hidden);
  at::Tensor forward(const at::Tensor& x) const;

  at::Tensor w_gate, w_up;  // [hidden, dim]
  at::Tensor w_down;        // [dim, hidden]
};
TORCH_MODULE(SwiGlu);

}  // namespace memscope::model
