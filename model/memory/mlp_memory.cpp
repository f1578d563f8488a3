#include "model/memory/mlp_memory.h"

#include <ATen/ATen.h>

#include <cmath>

#include "model/memory/small_matmul.h"

namespace memscope::model {

namespace {
constexpr double kLayerNormEps = 1e-5;

// GELU (exact, erf) written out: GELU(h) = h·Φ(h) = ½h(1 + erf(h/√2)). Not at::gelu: LibTorch
// 1.13's CPU gelu_backward returns garbage when its incoming gradient and its input have different
// memory layouts (a transposed gradient from a matmul's backward meets a contiguous h), which is
// exactly what the outer backward through an inner gradient (create_graph) produces. It read
// uninitialised memory in MLP-memory training with c > 1 (the reliability issue's item 1). erf,
// mul and add have layout-safe derivatives, in both LibTorch 1.13 and 2.x.
at::Tensor exact_gelu(const at::Tensor& h) { return 0.5 * h * (1.0 + at::erf(h * M_SQRT1_2)); }
}  // namespace

MlpPass mlp_pass(const at::Tensor& z, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& ln_weight,
                 const at::Tensor& ln_bias) {
  MlpPass p;
  p.h = small_matmul(z, w2.transpose(-1, -2));
  p.a = exact_gelu(p.h);
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
