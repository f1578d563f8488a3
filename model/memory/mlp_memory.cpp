#include "model/memory/mlp_memory.h"

#include <ATen/ATen.h>

#include <cmath>

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

// GELU (exact, erf) written out: GELU(h) = h·Φ(h) = ½h(1 + erf(h/√2)). Not at::gelu: LibTorch
// 1.13's CPU gelu_backward returns garbage when its incoming gradient and its input have different
// memory layouts (a transposed gradient from a matmul's backward meets a contiguous h), which is
// exactly what the outer backward through an inner gradient (create_graph) produces. It read
// uninitialised memory in MLP-memory training with c > 1 (the reliability issue's item 1). erf,
// mul and add have layout-safe derivatives, in both LibTorch 1.13 and 2.x.
at::Tensor exact_gelu(const at::Tensor& h) { return 0.5 * h * (1.0 + at::erf(h * M_SQRT1_2)); }

at::Tensor exact_gelu_derivative(const at::Tensor& h) {
  const double inv_sqrt_2pi = 0.5 * M_2_SQRTPI * M_SQRT1_2;  // 1/√(2π)
  return 0.5 * (1.0 + at::erf(h * M_SQRT1_2)) + h * at::exp(-0.5 * h * h) * inv_sqrt_2pi;
}

MlpPass mlp_pass(const at::Tensor& z, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& ln_weight,
                 const at::Tensor& ln_bias) {
  MlpPass p;
  p.h = small_matmul(z, w2.transpose(-1, -2));
  p.a = exact_gelu(p.h);
  p.o = small_matmul(p.a, w1.transpose(-1, -2));
  finish_mlp_pass(p, z, ln_weight, ln_bias);
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
  g.delta_h = small_matmul(g.delta_o, w1) * exact_gelu_derivative(pass.h);
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
