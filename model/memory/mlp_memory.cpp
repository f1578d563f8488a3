#include "model/memory/mlp_memory.h"

#include <ATen/ATen.h>

#include "model/memory/small_matmul.h"

namespace memscope::model {

namespace {
constexpr double kLayerNormEps = 1e-5;
}

MlpPass mlp_pass(const at::Tensor& z, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& ln_weight,
                 const at::Tensor& ln_bias) {
  MlpPass p;
  p.h = small_matmul(z, w2.transpose(-1, -2));
  p.a = at::gelu(p.h);
  p.o = small_matmul(p.a, w1.transpose(-1, -2));
  at::Tensor mean = p.o.mean(-1, /*keepdim=*/true);
  at::Tensor var = (p.o - mean).pow(2).mean(-1, /*keepdim=*/true);
  at::Tensor normed = (p.o - mean) / (var + kLayerNormEps).sqrt();
  // LN's [H,d] parameters broadcast over the batch and every axis between the head and d.
  std::vector<int64_t> view{ln_weight.size(0)};
  for (int64_t i = 0; i < z.dim() - 3; ++i) view.push_back(1);
  view.push_back(ln_weight.size(1));
  p.y = z + normed * ln_weight.view(view) + ln_bias.view(view);
  return p;
}

std::vector<at::Tensor> inner_gradient_inputs(const std::vector<at::Tensor>& weights, bool differentiable) {
  std::vector<at::Tensor> out;
  for (const auto& w : weights) out.push_back(differentiable ? w.view_as(w) : w.detach().requires_grad_(true));
  return out;
}

}  // namespace memscope::model
