// weight_views (model/memory/weight_views.h): views of one weight whose gradients are summed in one
// pass. Held to plain narrows in float64 (the gradient of several uses, whole and partial, some of
// them unused), to the second derivative, and to itself at one and two threads.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "memory_test_support.h"
#include "model/memory/weight_views.h"
#include "model/util/cpu_kernels.h"

using namespace memscope::model;
using memscope::test::error_at_unit_scale;

namespace {

// HOPE's uses of a [B,5,r,c] stack: the four projections, the whole stack twice, the main memory,
// and a use that reaches no loss.
const std::vector<WeightRange> kUses{{0, 4}, {}, {}, {4, 1}, {}, {1, 2}};

// A loss through every use but the last, nonlinear in the weight so that a second derivative exists.
at::Tensor loss(const std::vector<at::Tensor>& views, const std::vector<at::Tensor>& coefficients) {
  at::Tensor total = (views[0] * coefficients[0]).sum() + (views[1].pow(2) * coefficients[1]).sum();
  total = total + (views[2].sin() * coefficients[2]).sum() + (views[3] * coefficients[3]).pow(2).sum();
  return total + (views[4] * coefficients[4]).sum();
}

std::vector<at::Tensor> narrows(const at::Tensor& w, int64_t dim, const std::vector<WeightRange>& ranges) {
  std::vector<at::Tensor> views;
  for (const WeightRange& r : ranges)
    views.push_back(w.narrow(dim, r.start, r.length < 0 ? w.size(dim) - r.start : r.length));
  return views;
}

}  // namespace

TEST_CASE("weight_views' summed gradient equals plain narrows' in float64, to the second derivative",
          "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(31);
  const at::Tensor w0 = torch::randn({3, 5, 6, 7}), s = torch::randn({3, 5, 6, 7});
  std::vector<at::Tensor> coefficients;
  for (const at::Tensor& v : narrows(w0, 1, kUses)) coefficients.push_back(torch::randn(v.sizes()));
  auto gradients = [&](auto views_of, at::ScalarType dtype) {
    const at::Tensor w = w0.to(dtype).requires_grad_(true);
    std::vector<at::Tensor> c;
    for (const at::Tensor& t : coefficients) c.push_back(t.to(dtype));
    const at::Tensor first = torch::autograd::grad({loss(views_of(w, 1, kUses), c)}, {w}, {}, true, true)[0];
    const at::Tensor second = torch::autograd::grad({(first * s.to(dtype)).sum()}, {w})[0];
    const at::Tensor plain = torch::autograd::grad({loss(views_of(w, 1, kUses), c)}, {w})[0];
    return std::vector<at::Tensor>{plain, first.detach(), second};
  };
  const auto reference = gradients(narrows, at::kDouble);
  const auto ours = gradients(weight_views, at::kFloat);
  CHECK(error_at_unit_scale(ours[0], reference[0]) < 1e-6);
  CHECK(error_at_unit_scale(ours[1], reference[1]) < 1e-6);
  CHECK(error_at_unit_scale(ours[2], reference[2]) < 1e-6);
  if (memscope::test::cpu_kernels_testable()) {
    const at::Tensor w = w0.clone().requires_grad_(true);
    const auto views = weight_views(w, 1, kUses);
    REQUIRE(views[0].grad_fn());
    CHECK(views[0].grad_fn()->name().find("WeightViewsFunction") != std::string::npos);
  }
}

TEST_CASE("weight_views: no gradient for unused views, plain narrows without autograd, and a range error",
          "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  const at::Tensor w = torch::randn({2, 5, 3}, torch::requires_grad());
  const auto views = weight_views(w, -2, kUses);
  // Only the last view reaches the loss: the rest of the weight's gradient is zero.
  const at::Tensor g = torch::autograd::grad({views[5].sum()}, {w})[0];
  CHECK(at::equal(g, at::cat({torch::zeros({2, 1, 3}), torch::ones({2, 2, 3}), torch::zeros({2, 2, 3})}, 1)));
  {
    at::NoGradGuard no_grad;
    const auto plain = weight_views(w, 1, kUses);
    CHECK_FALSE(plain[1].grad_fn());
    CHECK(plain[3].sizes() == at::IntArrayRef{2, 1, 3});
  }
  CHECK_THROWS_WITH(weight_views(w, 1, {{3, 4}}), Catch::Contains("range [3, 7) is outside dim 1 of size 5"));
  CHECK_THROWS_WITH(weight_views(w, 3, {{}}), Catch::Contains("dim 3 is outside a 3-d weight"));
  CHECK_THROWS_WITH(weight_views(w, 1, {{0, -2}}),
                    Catch::Contains("length is -1 (to the end) or at least 0, got -2"));
}

TEST_CASE("weight_views: whole ranges along the rows, as the MLP dual forms take them, and the ATen route",
          "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(33);
  const at::Tensor w0 = torch::randn({2, 3, 6, 7});
  std::vector<at::Tensor> coefficients;
  for (int i = 0; i < 4; ++i) coefficients.push_back(torch::randn({2, 3, 6, 7}));
  auto gradient = [&](const at::Tensor& w, const std::vector<at::Tensor>& views) {
    at::Tensor total = (views[0] * coefficients[0]).sum() + (views[1].pow(2) * coefficients[1]).sum();
    total = total + (views[2].sin() * coefficients[2]).sum() + (views[3] * coefficients[3]).sum();
    return torch::autograd::grad({total}, {w})[0];
  };
  const at::Tensor w64 = w0.to(at::kDouble).requires_grad_(true);
  const at::Tensor reference = gradient(w64, {w64, w64, w64, w64});
  const at::Tensor w = w0.clone().requires_grad_(true);
  CHECK(error_at_unit_scale(gradient(w, weight_views(w, -2, whole(4))), reference) < 1e-6);
  ScopedAtenForms aten_forms;  // a GPU's route: autograd's own sums, and a whole range is w itself
  const auto plain = weight_views(w, -2, {{}, {2, 3}});
  CHECK(plain[0].is_same(w));
  CHECK(plain[1].sizes() == at::IntArrayRef{2, 3, 3, 7});
  CHECK(error_at_unit_scale(gradient(w, weight_views(w, -2, whole(4))), reference) < 1e-6);
}

TEST_CASE("weight_views' summed gradient is the same bits at one and two threads", "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(32);
  const at::Tensor w0 = torch::randn({16, 5, 64, 256});
  std::vector<at::Tensor> coefficients;
  for (const at::Tensor& v : narrows(w0, 1, kUses)) coefficients.push_back(torch::randn(v.sizes()));
  auto gradient = [&] {
    const at::Tensor w = w0.detach().requires_grad_(true);
    return torch::autograd::grad({loss(weight_views(w, 1, kUses), coefficients)}, {w})[0];
  };
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = gradient();
  at::set_num_threads(2);
  const at::Tensor two = gradient();
  at::set_num_threads(before);
  CHECK(at::equal(one, two));
}
