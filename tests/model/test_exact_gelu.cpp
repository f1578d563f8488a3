// exact_gelu and gelu_derivative_times (mlp_memory.h, exact_gelu.cpp): on the CPU in float32 they
// are autograd functions over gelu_math.h's loops. Held, at the value and the first, second and
// third derivatives, to autograd through the written-out ATen form in float64, for the layouts an
// inner gradient's backward hands them (a transposed gradient against a contiguous h, an h of
// overlapping windows).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>

#include "memory_test_support.h"
#include "model/memory/mlp_memory.h"
#include "model/util/cpu_kernels.h"

using namespace memscope::model;
using memscope::test::error_at_unit_scale;

namespace {

// The orders of one scalar loss through GELU, each a function of (h, w, u, s) in any dtype:
//   value  L0 = Σ w·GELU(h)
//   first  ∂L0/∂h = w·GELU'(h)                            (GeluFunction's backward)
//   second ∂/∂(h, w) of Σ u·∂L0/∂h                         (GeluBackwardFunction's backward: its loops
//          by a plain backward, its ATen branch by a create_graph one)
//   third  ∂/∂h of Σ s·∂²(Σ u·∂L0/∂h)/∂h², create_graph all the way (its differentiable branch)
struct Orders {
  at::Tensor value, first, second_h, second_w, third;
  at::Tensor second_h_plain;  // the second, by a plain backward (GeluBackwardFunction's loops)
};

Orders orders(const at::Tensor& h_in, const at::Tensor& w_in, const at::Tensor& u, const at::Tensor& s) {
  const at::Tensor h = h_in.detach().requires_grad_(true), w = w_in.detach().requires_grad_(true);
  Orders o;
  const at::Tensor a = exact_gelu(h);
  o.value = a.detach();
  const at::Tensor first = torch::autograd::grad({(w * a).sum()}, {h}, {}, true, true)[0];
  o.first = first.detach();
  o.second_h_plain = torch::autograd::grad({(u * first).sum()}, {h}, {}, /*retain_graph=*/true)[0];
  const auto second = torch::autograd::grad({(u * first).sum()}, {h, w}, {}, true, true);
  o.second_h = second[0].detach();
  o.second_w = second[1].detach();
  o.third = torch::autograd::grad({(s * second[0]).sum()}, {h})[0];
  return o;
}

void check_orders(const at::Tensor& h, const at::Tensor& w, const at::Tensor& u, const at::Tensor& s) {
  const Orders ours = orders(h, w, u, s);
  const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const Orders reference = orders(d(h), d(w), d(u), d(s));
  CHECK(error_at_unit_scale(ours.value, reference.value) < 1e-6);
  CHECK(error_at_unit_scale(ours.first, reference.first) < 1e-6);
  CHECK(error_at_unit_scale(ours.second_h, reference.second_h) < 1e-6);
  CHECK(error_at_unit_scale(ours.second_h_plain, reference.second_h) < 1e-6);
  CHECK(error_at_unit_scale(ours.second_w, reference.second_w) < 1e-6);
  CHECK(error_at_unit_scale(ours.third, reference.third) < 1e-5);
}

std::string node_name(const at::Tensor& t) { return t.grad_fn() ? t.grad_fn()->name() : std::string("none"); }

}  // namespace

TEST_CASE("exact_gelu's float32 loops equal autograd through its ATen form in float64 at every order",
          "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(5);
  const at::Tensor h = 3 * torch::randn({3, 4, 37});
  const at::Tensor w = torch::randn({3, 4, 37}), u = torch::randn({3, 4, 37}), s = torch::randn({3, 4, 37});
  SECTION("contiguous") { check_orders(h, w, u, s); }
  SECTION("h, w and u transposed views of different layouts") {
    check_orders(h.transpose(0, 2).contiguous().transpose(0, 2),
                 w.transpose(1, 2).contiguous().transpose(1, 2),
                 u.transpose(0, 1).contiguous().transpose(0, 1), s);
  }
  SECTION("h broadcast along an axis (stride 0)") {
    check_orders(h.select(1, 0).unsqueeze(1).expand({3, 4, 37}), w, u, s);
  }
}

TEST_CASE("gelu_derivative_times equals g times exact_gelu_derivative, with gradients, for mixed layouts",
          "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(6);
  // An h of overlapping windows (token_windows at c = 3) and a g that arrives transposed, as in
  // mlp_backward on a chunk's slots: the layouts LibTorch 1.13's own gelu_backward got wrong.
  const at::Tensor keys = 2 * torch::randn({2, 10, 8});
  const at::Tensor h = keys.unfold(1, 3, 1).transpose(-1, -2);  // [2, 8, 3, 8], windows overlap
  const at::Tensor g = torch::randn({2, 8, 8, 3}).transpose(-1, -2);
  const at::Tensor v = torch::randn({2, 8, 3, 8});
  auto run = [&](const at::Tensor& h0, const at::Tensor& g0, const at::Tensor& v0) {
    const at::Tensor hh = h0.detach().requires_grad_(true), gg = g0.detach().requires_grad_(true);
    const at::Tensor out = gelu_derivative_times(gg, hh);
    const auto grads = torch::autograd::grad({(v0 * out).sum()}, {gg, hh});
    return std::vector<at::Tensor>{out.detach(), grads[0], grads[1],
                                   node_name(out) == "none" ? at::Tensor() : out};
  };
  const auto ours = run(h, g, v);
  const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const auto reference = run(d(h), d(g), d(v));
  CHECK(error_at_unit_scale(ours[0], d(g) * exact_gelu_derivative(d(h))) < 1e-6);
  CHECK(error_at_unit_scale(ours[0], reference[0]) < 1e-6);
  CHECK(error_at_unit_scale(ours[1], reference[1]) < 1e-6);
  CHECK(error_at_unit_scale(ours[2], reference[2]) < 1e-6);
  // The loops' path is the one taken (its node is ours), so the checks above are of it.
  if (!memscope::test::cpu_kernels_testable()) return;
  INFO(node_name(ours[3]));
  CHECK(node_name(ours[3]).find("GeluBackwardFunction") != std::string::npos);
}

TEST_CASE("exact_gelu takes its loops on the CPU in float32 and its ATen form under ScopedAtenForms",
          "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  if (!memscope::test::cpu_kernels_testable()) return;
  torch::manual_seed(7);
  const at::Tensor h = (2 * torch::randn({64, 33})).requires_grad_(true);
  const at::Tensor loops = exact_gelu(h);
  CHECK(node_name(loops).find("GeluFunction") != std::string::npos);
  at::Tensor aten;
  {
    ScopedAtenForms aten_forms;
    aten = exact_gelu(h);
    CHECK(node_name(aten).find("Gelu") == std::string::npos);
  }
  CHECK(error_at_unit_scale(loops.detach(), aten.detach().to(at::kDouble)) < 1e-6);
  // float64 and no-grad float32 need no autograd function; NaN passes through.
  CHECK(node_name(exact_gelu(h.to(at::kDouble))).find("Gelu") == std::string::npos);
  {
    torch::NoGradGuard no_grad;
    const at::Tensor special = exact_gelu(torch::tensor({NAN, 0.0f, -30.0f, 30.0f}));
    CHECK(std::isnan(special[0].item<float>()));
    CHECK(special[1].item<float>() == 0.0f);
    CHECK(std::abs(special[2].item<float>()) < 1e-6f);
    CHECK(special[3].item<float>() == 30.0f);
  }
}
