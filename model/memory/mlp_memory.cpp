#include "model/memory/mlp_memory.h"

#include <ATen/ATen.h>

#include <utility>

#include "model/memory/small_matmul.h"

namespace memscope::model {

namespace {
constexpr double kLayerNormEps = 1e-5;  // SPEC §3

// LN's [H,d] parameters broadcast over the batch and every axis between the head and d.
at::Tensor ln_view(const at::Tensor& param, int64_t dims) {
  std::vector<int64_t> view{param.size(0)};
  for (int64_t i = 0; i < dims - 3; ++i) view.push_back(1);
  view.push_back(param.size(1));
  return param.view(view);
}
}  // namespace

MlpPass mlp_pass(const at::Tensor& z, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& ln_weight,
                 const at::Tensor& ln_bias) {
  MlpPass p;
  p.h = small_matmul(z, w2.transpose(-1, -2));
  p.a = exact_gelu(p.h);
  p.o = small_matmul(p.a, w1.transpose(-1, -2));
  finish_mlp_pass(p, z, ln_weight, ln_bias);
  return p;
}

MlpPass pass_rows(const MlpPass& pass, int64_t start, int64_t length) {
  MlpPass p;
  for (auto [from, to] : {std::pair{&pass.h, &p.h},
                          {&pass.a, &p.a},
                          {&pass.o, &p.o},
                          {&pass.n, &p.n},
                          {&pass.stdev, &p.stdev},
                          {&pass.y, &p.y}})
    *to = from->narrow(-2, start, length);
  return p;
}

void finish_mlp_pass(MlpPass& p, const at::Tensor& z, const at::Tensor& ln_weight, const at::Tensor& ln_bias) {
  at::Tensor mean = p.o.mean(-1, /*keepdim=*/true);
  at::Tensor var = (p.o - mean).pow(2).mean(-1, /*keepdim=*/true);
  p.stdev = (var + kLayerNormEps).sqrt();
  p.n = (p.o - mean) / p.stdev;
  p.y = z + p.n * ln_view(ln_weight, z.dim()) + ln_view(ln_bias, z.dim());
}

MlpBackward mlp_backward(const MlpPass& pass, const at::Tensor& dy, const at::Tensor& w1, const at::Tensor& ln_weight) {
  MlpBackward g;
  // Back through y = z + n·γ + β, then LN's normalisation: δo = (δn − mean δn − n·mean(δn·n))/stdev.
  const at::Tensor delta_n = dy * ln_view(ln_weight, dy.dim());
  g.delta_o = (delta_n - delta_n.mean(-1, true) - pass.n * (delta_n * pass.n).mean(-1, true)) / pass.stdev;
  // o = W_1 a, a = GELU(h).
  g.delta_h = gelu_derivative_times(small_matmul(g.delta_o, w1), pass.h);
  return g;
}

MlpInnerGradient mlp_inner_gradient(const MlpPass& pass, const at::Tensor& target, const at::Tensor& w1,
                                    const at::Tensor& ln_weight) {
  const double d = static_cast<double>(target.size(-1));
  const at::Tensor residual = pass.y - target;
  const MlpBackward back = mlp_backward(pass, residual / d, w1, ln_weight);
  return {back.delta_o, back.delta_h, 0.5 * residual.pow(2).sum(-1) / d};
}

std::vector<at::Tensor> inner_gradient_inputs(const std::vector<at::Tensor>& weights, bool differentiable) {
  std::vector<at::Tensor> out;
  for (const auto& w : weights)
    // A weight cut from the graph (a state carried across a train.bptt segment) is a constant of
    // the outer graph: a fresh leaf serves, and the key and value still carry the outer gradient.
    out.push_back(differentiable && w.requires_grad() ? w.view_as(w) : w.detach().requires_grad_(true));
  return out;
}

}  // namespace memscope::model
