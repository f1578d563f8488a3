// decayed_write (model/memory/decayed_write.h): W ⊙ p + U with p along W's rows or columns, its CPU
// loop and its ATen form (at::addcmul) held to the same expression in float64, with all three
// gradients and the second derivatives a create_graph backward takes.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "memory_test_support.h"
#include "model/memory/decayed_write.h"
#include "model/util/cpu_kernels.h"

using namespace memscope::model;
using memscope::test::error_at_unit_scale;

namespace {

struct Grads {
  at::Tensor out, d_w, d_p, d_u;  // a plain backward's
  at::Tensor dd_w, dd_p;          // ∂/∂(w, p) of Σ s·d_w + Σ r·d_p, through a create_graph backward
};

template <typename Write>
Grads run(Write write, const at::Tensor& w0, const at::Tensor& p0, const at::Tensor& u0, const at::Tensor& g,
          const at::Tensor& s, const at::Tensor& r) {
  const at::Tensor w = w0.detach().requires_grad_(true), p = p0.detach().requires_grad_(true),
                   u = u0.detach().requires_grad_(true);
  const at::Tensor out = write(w, p, u);
  const auto plain = torch::autograd::grad({out}, {w, p, u}, {g}, /*retain_graph=*/true);
  const auto first = torch::autograd::grad({out}, {w, p}, {g}, true, /*create_graph=*/true);
  const auto second = torch::autograd::grad({(s * first[0]).sum() + (r * first[1]).sum()}, {w, p});
  return {out.detach(), plain[0], plain[1], plain[2], second[0], second[1]};
}

at::Tensor written_out(const at::Tensor& w, const at::Tensor& p, const at::Tensor& u) { return w * p + u; }

}  // namespace

TEST_CASE(
    "decayed_write equals W times p plus U in float64, along rows and columns, to the second derivative",
    "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(21);
  const int64_t B = 3, H = 5, r = 7, c = 33;
  for (const bool rows : {true, false}) {
    // W as HOPE's stack, U a transposed product's result, g any layout.
    const at::Tensor w = torch::randn({B, H, r, c});
    const at::Tensor p =
        torch::rand(rows ? std::vector<int64_t>{B, H, r, 1} : std::vector<int64_t>{B, H, 1, c});
    const at::Tensor u = torch::randn({B, H, c, r}).transpose(-1, -2), g = torch::randn({B, H, r, c});
    const at::Tensor s = torch::randn({B, H, r, c}), rr = torch::randn(p.sizes());
    const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
    const Grads reference = run(written_out, d(w), d(p), d(u), d(g), d(s), d(rr));
    const Grads loop = run(decayed_write, w, p, u, g, s, rr);
    Grads aten;
    {
      ScopedAtenForms aten_forms;
      aten = run(decayed_write, w, p, u, g, s, rr);
    }
    INFO((rows ? "p along the rows" : "p along the columns"));
    for (const Grads* ours : std::vector<const Grads*>{&loop, &aten}) {
      CHECK(error_at_unit_scale(ours->out, reference.out) < 1e-6);
      CHECK(error_at_unit_scale(ours->d_w, reference.d_w) < 1e-6);
      CHECK(error_at_unit_scale(ours->d_p, reference.d_p) < 1e-5);  // a sum over a row or a column
      CHECK(error_at_unit_scale(ours->d_u, reference.d_u) < 1e-6);
      CHECK(error_at_unit_scale(ours->dd_w, reference.dd_w) < 1e-6);
      CHECK(error_at_unit_scale(ours->dd_p, reference.dd_p) < 1e-5);
    }
  }
}

TEST_CASE("decayed_write holds for one-row and one-column matrices and for strided operands", "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(23);
  const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  struct Case {
    at::Tensor w, p;
  };
  const std::vector<Case> cases{
      {torch::randn({4, 1, 9}), torch::rand({4, 1, 1})},                     // one row, p along it
      {torch::randn({4, 1, 9}), torch::rand({4, 1, 9})},                     // one row, p along its columns
      {torch::randn({4, 9, 1}), torch::rand({4, 1, 1})},                     // one column
      {torch::randn({4, 9, 6}).transpose(-1, -2), torch::rand({4, 6, 1})},   // W a transposed view
      {torch::randn({4, 6, 9}), torch::rand({4, 9}).unsqueeze(1)},           // p a strided view
      {torch::randn({1, 6, 9}).expand({4, 6, 9}), torch::rand({4, 1, 9})}};  // W broadcast (stride 0)
  for (size_t i = 0; i < cases.size(); ++i) {
    const at::Tensor &w = cases[i].w, &p = cases[i].p;
    const at::Tensor u = torch::randn(w.sizes()), g = torch::randn(w.sizes());
    const at::Tensor s = torch::randn(w.sizes()), r = torch::randn(p.sizes());
    const Grads reference = run(written_out, d(w), d(p), d(u), d(g), d(s), d(r));
    const Grads ours = run(decayed_write, w, p, u, g, s, r);
    INFO("case " << i);
    CHECK(error_at_unit_scale(ours.out, reference.out) < 1e-6);
    CHECK(error_at_unit_scale(ours.d_w, reference.d_w) < 1e-6);
    CHECK(error_at_unit_scale(ours.d_p, reference.d_p) < 1e-5);
    CHECK(error_at_unit_scale(ours.d_u, reference.d_u) < 1e-6);
    CHECK(error_at_unit_scale(ours.dd_p, reference.dd_p) < 1e-5);
  }
}

TEST_CASE("decayed_write takes its loop on the CPU in float32 only for a stack it can read", "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(24);
  const at::Tensor w = torch::randn({2, 3, 4, 5}, torch::requires_grad()), u = torch::randn({2, 3, 4, 5});
  const at::Tensor rows = torch::rand({2, 3, 4, 1}), columns = torch::rand({2, 3, 1, 5});
  if (memscope::test::cpu_kernels_testable()) {
    CHECK(decayed_write_loop_applies(w, rows, u));
    CHECK(decayed_write_loop_applies(w, columns, u));
    const at::Tensor out = decayed_write(w, rows, u);
    REQUIRE(out.grad_fn());
    CHECK(out.grad_fn()->name().find("DecayedWriteFunction") != std::string::npos);
  }
  // A p shared over the stack, a full-size p, another dtype: at::addcmul, the same values to float32
  // rounding (addcmul may fuse the multiply and add; where u ≈ −w·p the default 1e-8 floor failed).
  for (const at::Tensor& p : {torch::rand({1, 3, 4, 1}), torch::rand({2, 3, 4, 5})}) {
    CHECK_FALSE(decayed_write_loop_applies(w, p, u));
    CHECK(at::allclose(decayed_write(w, p, u), w * p + u, 1e-5, 1e-6));
  }
  CHECK_FALSE(decayed_write_loop_applies(w.to(at::kDouble), rows.to(at::kDouble), u.to(at::kDouble)));
}

TEST_CASE("decayed_write's gradients are the same bits at one and two threads", "[model]") {
  memscope::test::ScopedCpuDevice cpu;
  torch::manual_seed(22);
  const at::Tensor w = torch::randn({16, 5, 64, 256}), u = torch::randn({16, 5, 64, 256}),
                   g = torch::randn({16, 5, 64, 256});
  for (const at::Tensor& p : {torch::rand({16, 5, 64, 1}), torch::rand({16, 5, 1, 256})}) {
    auto grads = [&] {
      const at::Tensor wr = w.detach().requires_grad_(true), pr = p.detach().requires_grad_(true);
      return torch::autograd::grad({decayed_write(wr, pr, u)}, {wr, pr}, {g});
    };
    const int before = at::get_num_threads();
    at::set_num_threads(1);
    const auto one = grads();
    at::set_num_threads(2);
    const auto two = grads();
    at::set_num_threads(before);
    CHECK(at::equal(one[0], two[0]));
    CHECK(at::equal(one[1], two[1]));
  }
}
