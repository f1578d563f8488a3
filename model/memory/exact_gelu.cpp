// The MLP memory's exact (erf) GELU and its derivative, as autograd sees them (mlp_memory.h).
//
// Written out, GELU(h) = ½h(1 + erf(h/√2)) is a dozen ATen ops, and taking an inner gradient through
// it (GELU'(h) = Φ(h) + h·φ(h)) and then the outer gradient through that (GELU''(h) = φ(h)(2 − h²))
// makes the d256 MLP-memory training step spend a seventh of its time in small elementwise ops over
// [tokens, 4d] (bench/device_bench --op-times). On the CPU in float32 each of the three is one pass
// of gelu_math.h's vectorised loops instead, inside two autograd functions:
//   GeluFunction:         h ↦ GELU(h),        backward g ↦ g·GELU'(h)   (GeluBackwardFunction)
//   GeluBackwardFunction: (g, h) ↦ g·GELU'(h), backward gg ↦ (gg·GELU'(h), gg·g·GELU''(h))
// A backward that must itself be differentiable (create_graph: an inner gradient through GELU, or a
// third derivative) is built from the same functions and ATen ops, so every order stays exact. On
// other devices and dtypes, and under ScopedAtenForms, the ATen forms below are the whole story;
// tests/model/test_exact_gelu.cpp holds the two to each other at every order.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "model/memory/gelu_math.h"
#include "model/memory/mlp_memory.h"
#include "model/util/cpu_kernels.h"

namespace memscope::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kInvSqrt2Pi = 0.5 * M_2_SQRTPI * M_SQRT1_2;  // 1/√(2π)

// Not at::gelu: LibTorch 1.13's CPU gelu_backward returns garbage when its incoming gradient and
// its input have different memory layouts (a transposed gradient from a matmul's backward meets a
// contiguous h), which is exactly what the outer backward through an inner gradient (create_graph)
// produces. It read uninitialised memory in MLP-memory training with c > 1 (the reliability issue's
// item 1). erf, exp, mul and add have layout-safe derivatives, in both LibTorch 1.13 and 2.x.
at::Tensor gelu_aten(const at::Tensor& h) { return 0.5 * h * (1.0 + at::erf(h * M_SQRT1_2)); }
at::Tensor second_derivative_aten(const at::Tensor& h) {
  return at::exp(-0.5 * h * h) * kInvSqrt2Pi * (2.0 - h * h);
}

// Whether the loops take these tensors: float32 on the CPU, with the CPU's kernels on, one shape.
bool loops_apply(const at::Tensor& h, const at::Tensor& g = {}) {
  if (h.scalar_type() != at::kFloat || !cpu_kernels_on(h.device())) return false;
  return !g.defined() ||
         (g.scalar_type() == at::kFloat && g.device() == h.device() && g.sizes() == h.sizes());
}

// Runs `loop(h, x, count)` over matching pieces of contiguous h and x, in parallel.
template <typename Loop>
void over_elements(const at::Tensor& h, at::Tensor& x, Loop loop) {
  const float* hp = h.data_ptr<float>();
  float* xp = x.data_ptr<float>();
  at::parallel_for(0, x.numel(), 16384,
                   [&](int64_t begin, int64_t end) { loop(hp + begin, xp + begin, end - begin); });
}

at::Tensor gelu_loop(const at::Tensor& h) {
  const at::Tensor hc = h.contiguous();
  at::Tensor out = at::empty(hc.sizes(), hc.options());
  over_elements(hc, out, gelu_array);
  return out;
}

// g·f(h) without autograd, f = GELU' or GELU'': `multiply(h, x, n)` scales x in place, so it runs
// on a fresh contiguous copy of g (any layout, broadcast to h's shape).
at::Tensor times_loop(const at::Tensor& g, const at::Tensor& h,
                      void (*multiply)(const float*, float*, int64_t)) {
  at::Tensor out = g.expand(h.sizes()).clone(at::MemoryFormat::Contiguous);
  over_elements(h.contiguous(), out, multiply);
  return out;
}
at::Tensor times_derivative_loop(const at::Tensor& g, const at::Tensor& h) {
  return times_loop(g, h, multiply_by_gelu_derivative);
}

struct GeluBackwardFunction : public torch::autograd::Function<GeluBackwardFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& g, const at::Tensor& h) {
    ctx->save_for_backward({g, h});
    return times_derivative_loop(g, h);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &g = saved[0], &h = saved[1], &gg = grads[0];
    at::Tensor d_g, d_h;
    if (ctx->needs_input_grad(0)) d_g = gelu_derivative_times(gg, h);
    if (ctx->needs_input_grad(1))
      d_h = at::GradMode::is_enabled() ? gg * g * second_derivative_aten(h)
                                       : times_loop(gg * g, h, multiply_by_gelu_second_derivative);
    return {d_g, d_h};
  }
};

struct GeluFunction : public torch::autograd::Function<GeluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h) {
    ctx->save_for_backward({h});
    return gelu_loop(h);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {gelu_derivative_times(grads[0], ctx->get_saved_variables()[0])};
  }
};

bool records_graph(const at::Tensor& a, const at::Tensor& b = {}) {
  return at::GradMode::is_enabled() && (a.requires_grad() || (b.defined() && b.requires_grad()));
}

}  // namespace

at::Tensor exact_gelu(const at::Tensor& h) {
  if (!loops_apply(h)) return gelu_aten(h);
  return records_graph(h) ? GeluFunction::apply(h) : gelu_loop(h);
}

at::Tensor exact_gelu_derivative(const at::Tensor& h) {
  return 0.5 * (1.0 + at::erf(h * M_SQRT1_2)) + h * at::exp(-0.5 * h * h) * kInvSqrt2Pi;
}

at::Tensor gelu_derivative_times(const at::Tensor& g, const at::Tensor& h) {
  if (!loops_apply(h, g)) return g * exact_gelu_derivative(h);
  return records_graph(g, h) ? GeluBackwardFunction::apply(g, h) : times_derivative_loop(g, h);
}

}  // namespace memscope::model
