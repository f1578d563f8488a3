// state_update (model/memory/state_update.h): the dual form's chunk-end update a·M + c·S + xᵀy as
// one loop per matrix with a written-out backward. Held to its ATen form in float64 (values), and
// its gradients, and a second derivative through create_graph, to autograd's through that form,
// with and without the momentum term, for a chunk below and above the 16 rows where its backward
// changes route.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "model/memory/state_update.h"
#include "model/util/cpu_kernels.h"
#include "support/test_device.h"

using namespace memscope::model;

namespace {

struct Operands {
  at::Tensor a, m, c, s, x, y;
};

Operands operands(int64_t n, bool momentum) {
  const int64_t B = 2, H = 3, p = 16, q = 40;
  Operands o;
  o.a = torch::rand({B, H}) + 0.5;
  o.m = torch::randn({B, H, p, q});
  if (momentum) {
    o.c = -torch::rand({B, H});
    o.s = torch::randn({B, H, p, q});
  }
  o.x = torch::randn({B, H, n, p});
  o.y = torch::randn({B, H, n, q});
  return o;
}

double relative(const at::Tensor& ours, const at::Tensor& reference) {
  if (reference.numel() == 0) return ours.numel() == 0 ? 0.0 : 1.0;  // an empty matrix's gradient
  const double scale = std::max(1.0, reference.abs().max().item<double>());
  return (ours.to(at::kDouble) - reference.to(at::kDouble)).abs().max().item<double>() / scale;
}

// f = Σ w ⊙ out² for state_update (ours) or its ATen form in float64 (the reference, at::matmul):
// the gradients of f, which depend on every operand, and with `second` also those of ⟨∇f, cos θ⟩.
std::vector<at::Tensor> derivatives(const Operands& o, const at::Tensor& weight, bool ours, bool second) {
  std::vector<at::Tensor> leaves;
  auto leaf = [&](const at::Tensor& t) {
    if (!t.defined()) return t;
    leaves.push_back((ours ? t.detach().clone() : t.detach().to(at::kDouble)).requires_grad_(true));
    return leaves.back();
  };
  const at::Tensor a = leaf(o.a), m = leaf(o.m), c = leaf(o.c), s = leaf(o.s), x = leaf(o.x), y = leaf(o.y);
  const at::Tensor out = ours ? state_update(a, m, c, s, x, y) : state_update_reference(a, m, c, s, x, y);
  const at::Tensor f = (weight.to(out.dtype()) * out * out).sum();
  const auto first = torch::autograd::grad({f}, leaves, {}, /*retain_graph=*/second, /*create_graph=*/second);
  std::vector<at::Tensor> all;
  for (const auto& g : first) all.push_back(g.detach());
  if (!second) return all;
  at::Tensor directional = at::zeros({}, out.options());
  for (size_t i = 0; i < first.size(); ++i)
    directional = directional + (first[i] * leaves[i].detach().cos()).sum();
  for (const auto& g : torch::autograd::grad({directional}, leaves)) all.push_back(g);
  return all;
}

}  // namespace

TEST_CASE("state_update equals its ATen form: values, gradients and a second derivative", "[model]") {
  if (!memscope::test::cpu_kernels_testable()) return;  // MEMSCOPE_CPU_KERNELS=0: the loop is off
  torch::manual_seed(11);
  for (const bool momentum : {false, true}) {
    for (const int64_t n : {4, 16, 21}) {
      INFO("momentum " << momentum << ", chunk of " << n);
      const Operands o = operands(n, momentum);
      REQUIRE(state_update_applies(o.a, o.m, o.c, o.s, o.x, o.y));
      {
        const at::Tensor ours = state_update(o.a, o.m, o.c, o.s, o.x, o.y);
        auto d = [](const at::Tensor& t) { return t.defined() ? t.to(at::kDouble) : t; };
        const at::Tensor reference = state_update_reference(d(o.a), d(o.m), d(o.c), d(o.s), d(o.x), d(o.y));
        CHECK(relative(ours, reference) < 1e-5);
      }
      const at::Tensor weight = torch::randn(o.m.sizes());
      // The plain backward is the written-out loop; the second derivative goes through the
      // backward's create_graph route.
      for (const bool second : {false, true}) {
        const auto ours = derivatives(o, weight, true, second),
                   reference = derivatives(o, weight, false, second);
        REQUIRE(ours.size() == reference.size());
        for (size_t i = 0; i < ours.size(); ++i) {
          INFO("derivative " << i << " (first, then second, in the order a, m, [c, s,] x, y)");
          CHECK(relative(ours[i], reference[i]) < 1e-5);
        }
      }
    }
  }
}

TEST_CASE("state_update leaves to its ATen form what its loop does not take", "[model]") {
  const Operands o = operands(4, true);
  auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  CHECK_FALSE(state_update_applies(d(o.a), d(o.m), d(o.c), d(o.s), d(o.x), d(o.y)));
  CHECK(at::equal(state_update(d(o.a), d(o.m), d(o.c), d(o.s), d(o.x), d(o.y)),
                  state_update_reference(d(o.a), d(o.m), d(o.c), d(o.s), d(o.x), d(o.y))));
  CHECK_FALSE(state_update_applies(o.a, o.m, o.c, {}, o.x, o.y));                   // c without s
  CHECK_FALSE(state_update_applies(o.a.unsqueeze(0), o.m, o.c, o.s, o.x, o.y));     // a's batch not m's
  CHECK_FALSE(state_update_applies(o.a, o.m, o.c, o.s, o.x.slice(-2, 0, 3), o.y));  // x, y disagree on n
  const ScopedAtenForms gpu_forms;
  CHECK_FALSE(state_update_applies(o.a, o.m, o.c, o.s, o.x, o.y));
}

TEST_CASE("state_update takes views as the dual form passes them, and gradients for some inputs only",
          "[model]") {
  if (!memscope::test::cpu_kernels_testable()) return;  // MEMSCOPE_CPU_KERNELS=0: the loop is off
  torch::manual_seed(17);
  const int64_t B = 2, H = 3, n = 5, p = 16, q = 24;
  // As dual_end_state passes them: a is one column of a [B,H,n] product, x and y chunks split from
  // a longer sequence, M a transposed view.
  const at::Tensor products = torch::rand({B, H, n}) + 0.5, sequence = torch::randn({B, H, 3 * n, p + q});
  const at::Tensor m_t = torch::randn({B, H, q, p});
  const at::Tensor weight = torch::randn({B, H, p, q});
  for (const bool only_m : {false, true}) {
    INFO((only_m ? "only M requires grad" : "every input requires grad"));
    auto run = [&](bool ours) {
      auto cast = [&](const at::Tensor& t) { return ours ? t : t.to(at::kDouble); };
      const at::Tensor pr = cast(products).requires_grad_(!only_m),
                       seq = cast(sequence).requires_grad_(!only_m);
      const at::Tensor mt = cast(m_t).requires_grad_(true);
      const at::Tensor a = pr.select(-1, n - 1), m = mt.transpose(-1, -2);
      const auto parts = seq.split_with_sizes({n, n, n}, 2);
      const at::Tensor x = parts[1].narrow(-1, 0, p), y = parts[1].narrow(-1, p, q);
      if (ours) REQUIRE(state_update_applies(a, m, {}, {}, x, y));
      const at::Tensor out =
          ours ? state_update(a, m, {}, {}, x, y) : state_update_reference(a, m, {}, {}, x, y);
      std::vector<at::Tensor> leaves{mt};
      if (!only_m) leaves.insert(leaves.end(), {pr, seq});
      std::vector<at::Tensor> result{out.detach()};
      for (const auto& g : torch::autograd::grad({(weight.to(out.dtype()) * out).sum()}, leaves))
        result.push_back(g);
      return result;
    };
    const auto ours = run(true), reference = run(false);
    REQUIRE(ours.size() == reference.size());
    for (size_t i = 0; i < ours.size(); ++i) {
      INFO("0: values, then the gradients of M, [a's source, the sequence]");
      CHECK(relative(ours[i], reference[i]) < 1e-5);
    }
  }
}

namespace {

// momentum_end_update's operands at chunk n: every gate a [B,H] scalar, M and S [B,H,p,q].
MomentumEndOperands end_operands(int64_t n, int64_t p = 16, int64_t q = 40) {
  const int64_t B = 2, H = 3;
  return {torch::rand({B, H}) + 0.5,  torch::randn({B, H, p, q}), -torch::rand({B, H}),
          torch::randn({B, H, p, q}), torch::randn({B, H, n, p}), torch::rand({B, H}) + 0.2,
          torch::randn({B, H, n, p}), torch::randn({B, H, n, q})};
}

// f = Σ over the outputs in `used` (0 memory, 1 momentum, 2 start) of w_i ⊙ out_i², through
// momentum_end_update (ours) or two state_update_references in float64: its gradients in a, m, c, s,
// x, b, u, y (zero for an operand f does not reach), then with `second` those of ⟨∇f, cos θ⟩.
std::vector<at::Tensor> end_derivatives(const MomentumEndOperands& o, const std::vector<at::Tensor>& w,
                                        const std::vector<int>& used, bool ours, bool second) {
  std::vector<at::Tensor> leaves;
  for (const at::Tensor* t : {&o.a, &o.m, &o.c, &o.s, &o.x, &o.b, &o.u, &o.y})
    leaves.push_back((ours ? t->detach().clone() : t->detach().to(at::kDouble)).requires_grad_(true));
  const MomentumEndOperands in{leaves[0], leaves[1], leaves[2], leaves[3],
                               leaves[4], leaves[5], leaves[6], leaves[7]};
  const MomentumEnd end = ours ? momentum_end_update(in) : momentum_end_reference(in);
  const at::Tensor outputs[] = {end.memory, end.momentum, end.start};
  at::Tensor f = at::zeros({}, end.memory.options());
  for (const int i : used) f = f + (w[i].to(f.dtype()) * outputs[i] * outputs[i]).sum();
  auto dense = [&](const std::vector<at::Tensor>& grads) {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < grads.size(); ++i)
      out.push_back(grads[i].defined() ? grads[i] : at::zeros_like(leaves[i]));
    return out;
  };
  const auto first = dense(torch::autograd::grad({f}, leaves, {}, second, second, /*allow_unused=*/true));
  std::vector<at::Tensor> all;
  for (const auto& g : first) all.push_back(g.detach());
  if (!second) return all;
  at::Tensor directional = at::zeros({}, f.options());
  for (size_t i = 0; i < first.size(); ++i)
    if (first[i].requires_grad()) directional = directional + (first[i] * leaves[i].detach().cos()).sum();
  if (!directional.requires_grad()) return all;
  for (const auto& g : dense(torch::autograd::grad({directional}, leaves, {}, false, false, true)))
    all.push_back(g);
  return all;
}

}  // namespace

TEST_CASE(
    "momentum_end_update equals its two ATen forms, through any of its outputs, to the second derivative",
    "[model]") {
  if (!memscope::test::cpu_kernels_testable()) return;  // MEMSCOPE_CPU_KERNELS=0: the loop is off
  torch::manual_seed(23);
  for (const int64_t n : {4, 16, 21}) {
    const MomentumEndOperands o = end_operands(n);
    REQUIRE(momentum_end_applies(o));
    {
      const MomentumEnd ours = momentum_end_update(o);
      auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
      const MomentumEnd reference =
          momentum_end_reference({d(o.a), d(o.m), d(o.c), d(o.s), d(o.x), d(o.b), d(o.u), d(o.y)});
      INFO("chunk of " << n);
      CHECK(relative(ours.memory, reference.memory) < 1e-5);
      CHECK(relative(ours.momentum, reference.momentum) < 1e-5);
      CHECK(ours.start.is_same(o.s));  // without autograd, S itself
    }
    std::vector<at::Tensor> w;
    for (int i = 0; i < 3; ++i) w.push_back(torch::randn(o.m.sizes()));
    // Every output, each one alone (the start alone is the last chunk's case: its gradient passes
    // through uncopied), and the pairs.
    const std::vector<std::vector<int>> uses{{0, 1, 2}, {0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1}};
    for (const auto& used : uses)
      for (const bool second : {false, true}) {
        INFO("chunk of " << n << ", outputs used " << used.size() << " from " << used.front() << ", second "
                         << second);
        const auto ours = end_derivatives(o, w, used, true, second),
                   reference = end_derivatives(o, w, used, false, second);
        REQUIRE(ours.size() == reference.size());
        for (size_t i = 0; i < ours.size(); ++i) {
          INFO("derivative " << i << " (first, then second, in the order a, m, c, s, x, b, u, y)");
          CHECK(relative(ours[i], reference[i]) < 1e-5);
        }
      }
  }
}

TEST_CASE("momentum_end_update's start is a view of S, and S itself on the ATen route", "[model]") {
  if (!memscope::test::cpu_kernels_testable()) return;
  torch::manual_seed(29);
  const MomentumEndOperands o = end_operands(16);
  const at::Tensor s = o.s.clone().requires_grad_(true);
  const MomentumEnd end = momentum_end_update({o.a, o.m, o.c, s, o.x, o.b, o.u, o.y});
  CHECK(end.start.data_ptr() == s.data_ptr());
  CHECK(end.start.sizes() == s.sizes());
  CHECK(end.start.grad_fn() != nullptr);  // the function's node, which sums S's three gradients
  const memscope::model::ScopedAtenForms gpu_forms;
  CHECK_FALSE(momentum_end_applies(o));
  CHECK(momentum_end_update({o.a, o.m, o.c, s, o.x, o.b, o.u, o.y}).start.is_same(s));
}

TEST_CASE("momentum_end_update with empty matrices, an expanded incoming gradient, and some inputs only",
          "[model]") {
  if (!memscope::test::cpu_kernels_testable()) return;
  torch::manual_seed(41);
  // f = Σ memory (`expanded`: its incoming gradient an expanded 1, stride 0) or Σ w ⊙ memory (a
  // fresh gradient, whose data an empty matrix leaves null), + Σ w ⊙ momentum² + Σ start.
  // `needs`: which of a, m, c, s, x, b, u, y require grad (the others are constants).
  auto gradients = [](const MomentumEndOperands& o, const std::vector<bool>& needs, const at::Tensor& w,
                      bool expanded, bool ours) {
    std::vector<at::Tensor> in, leaves;
    size_t i = 0;
    for (const at::Tensor* t : {&o.a, &o.m, &o.c, &o.s, &o.x, &o.b, &o.u, &o.y}) {
      const at::Tensor v = ours ? t->detach().clone() : t->detach().to(at::kDouble);
      in.push_back(needs[i++] ? v.requires_grad_(true) : v);
      if (in.back().requires_grad()) leaves.push_back(in.back());
    }
    const MomentumEndOperands operands{in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7]};
    const MomentumEnd end = ours ? momentum_end_update(operands) : momentum_end_reference(operands);
    const at::Tensor weight = w.to(end.momentum.dtype());
    const at::Tensor f = (expanded ? end.memory.sum() : (weight * end.memory).sum()) +
                         (weight * end.momentum.pow(2)).sum() + end.start.sum();
    std::vector<at::Tensor> out;
    for (const at::Tensor& g : torch::autograd::grad({f}, leaves)) out.push_back(g);
    return out;
  };
  const std::vector<bool> every(8, true), weights_only{false, true, false, true, false, false, false, false};
  for (const auto& [p, q] : std::vector<std::pair<int64_t, int64_t>>{{16, 40}, {0, 40}, {16, 0}}) {
    const MomentumEndOperands o = end_operands(5, p, q);
    REQUIRE(momentum_end_applies(o));
    const at::Tensor w = torch::randn(o.m.sizes());
    for (const auto* needs : {&every, &weights_only})
      for (const bool expanded : {true, false}) {
        INFO("p " << p << ", q " << q << (needs == &every ? ", every input" : ", only M and S")
                  << " requires grad" << (expanded ? ", memory's gradient expanded" : ""));
        const auto ours = gradients(o, *needs, w, expanded, true),
                   reference = gradients(o, *needs, w, expanded, false);
        REQUIRE(ours.size() == reference.size());
        for (size_t i = 0; i < ours.size(); ++i) {
          INFO("gradient " << i << " of the inputs that require grad, in the order a, m, c, s, x, b, u, y");
          REQUIRE(ours[i].sizes() == reference[i].sizes());
          CHECK(relative(ours[i], reference[i]) < 1e-5);
        }
      }
  }
}
