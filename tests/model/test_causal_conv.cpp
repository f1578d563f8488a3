// causal_depthwise_conv (model/memory/causal_conv.h): its CPU loops and its ATen form, held to the
// convolution written as unfold's product in float64 (values, both gradients, and the second
// derivatives a create_graph backward takes), and to each other bit for bit forward.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "memory_test_support.h"
#include "model/memory/causal_conv.h"
#include "model/util/cpu_kernels.h"

using namespace memscope::model;
using memscope::test::error_at_unit_scale;

namespace {

// The definition: out[b,t,c] = Σ_k padded[b,t+k,c]·taps[c,k].
at::Tensor unfolded(const at::Tensor& padded, const at::Tensor& taps) {
  return (padded.unfold(1, taps.size(1), 1) * taps).sum(-1);
}

struct Grads {
  at::Tensor out, d_x, d_w;  // a plain backward's
  at::Tensor dd_x, dd_w;     // ∂/∂(x, w) of Σ u·d_x + Σ s·d_w, through a create_graph backward
};

template <typename Conv>
Grads run(Conv conv, const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& g, const at::Tensor& u,
          const at::Tensor& s) {
  const at::Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
  const at::Tensor out = conv(x, w);
  const auto plain = torch::autograd::grad({out}, {x, w}, {g}, /*retain_graph=*/true);
  const auto first = torch::autograd::grad({out}, {x, w}, {g}, true, /*create_graph=*/true);
  const auto second = torch::autograd::grad({(u * first[0]).sum() + (s * first[1]).sum()}, {x, w});
  return {out.detach(), plain[0], plain[1], second[0], second[1]};
}

}  // namespace

TEST_CASE(
    "causal_depthwise_conv equals the unfolded convolution in float64, with its first and second derivatives",
    "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(11);
  for (const int64_t T : {1, 5, 37}) {
    const int64_t B = 3, C = 13, K = 4;
    // The padded input as the memory layer builds it: a cat, then read through a transposed view.
    const at::Tensor x = torch::randn({B, C, T + K - 1}).transpose(1, 2);
    const at::Tensor w = torch::randn({C, K}), g = torch::randn({B, T, C});
    const at::Tensor u = torch::randn({B, T + K - 1, C}), s = torch::randn({C, K});
    const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
    const Grads reference = run(unfolded, d(x), d(w), d(g), d(u), d(s));
    const Grads loops = run(causal_depthwise_conv, x, w, g, u, s);
    Grads aten;
    {
      ScopedAtenForms aten_forms;
      aten = run(causal_depthwise_conv, x, w, g, u, s);
    }
    INFO("T = " << T);
    for (const Grads* ours : std::vector<const Grads*>{&loops, &aten}) {
      CHECK(error_at_unit_scale(ours->out, reference.out) < 1e-6);
      CHECK(error_at_unit_scale(ours->d_x, reference.d_x) < 1e-6);
      CHECK(error_at_unit_scale(ours->d_w, reference.d_w) < 1e-5);  // a sum over B·T rows
      CHECK(error_at_unit_scale(ours->dd_x, reference.dd_x) < 1e-6);
      CHECK(error_at_unit_scale(ours->dd_w, reference.dd_w) < 1e-5);
    }
    // Forward, the loops add the taps in the ATen form's order: the same bits.
    CHECK(at::equal(loops.out, aten.out));
  }
}

TEST_CASE("causal_depthwise_conv takes its loops on the CPU in float32 and names a shape error", "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  const at::Tensor x = torch::randn({2, 7, 5}, torch::requires_grad()), w = torch::randn({5, 4});
  if (memscope::test::cpu_kernels_testable()) {
    const at::Tensor out = causal_depthwise_conv(x, w);
    REQUIRE(out.grad_fn());
    CHECK(out.grad_fn()->name().find("CausalConvFunction") != std::string::npos);
  }
  // No token after the carried ones: an empty output, and zero gradients.
  const at::Tensor carried = torch::randn({2, 3, 5}, torch::requires_grad()),
                   taps = torch::randn({5, 4}, torch::requires_grad());
  const at::Tensor none = causal_depthwise_conv(carried, taps);
  CHECK(none.sizes() == at::IntArrayRef{2, 0, 5});
  const auto grads = torch::autograd::grad({none.sum()}, {carried, taps});
  CHECK(grads[0].abs().sum().item<float>() == 0.0f);
  CHECK(grads[1].abs().sum().item<float>() == 0.0f);
  CHECK_THROWS_WITH(causal_depthwise_conv(x, torch::randn({6, 4})),
                    Catch::Contains("padded [B,T+K-1,C] and taps [C,K]"));
  CHECK_THROWS_WITH(causal_depthwise_conv(torch::randn({2, 2, 5}), w),
                    Catch::Contains("2 padded tokens for 4 taps"));
  CHECK_THROWS_WITH(causal_depthwise_conv(x, torch::randn({5, 0})), Catch::Contains("need K >= 1"));
}

TEST_CASE("causal_depthwise_conv's gradients are the same bits at one and two threads", "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(12);
  const at::Tensor x = torch::randn({4, 303, 24}), w = torch::randn({24, 4}), g = torch::randn({4, 300, 24});
  auto grads = [&] {
    const at::Tensor xr = x.detach().requires_grad_(true), wr = w.detach().requires_grad_(true);
    return torch::autograd::grad({causal_depthwise_conv(xr, wr)}, {xr, wr}, {g});
  };
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = grads();
  at::set_num_threads(2);
  const auto two = grads();
  at::set_num_threads(before);
  CHECK(at::equal(one[0], two[0]));
  CHECK(at::equal(one[1], two[1]));  // 1200 rows: five partials, added in one order
}
