// SPEC §9 special cases (seed 003's table): each configuration reduces exactly to the named rule,
// which is written out by hand here from the step's recorded inputs.
#include <catch2/catch.hpp>

#include "memory_test_support.h"

using namespace memscope::model;
using namespace memscope::test;

namespace {

torch::Tensor mat(const torch::Tensor& g) { return g.unsqueeze(-1).unsqueeze(-1); }
torch::Tensor outer_product(const torch::Tensor& a, const torch::Tensor& b) { return a.unsqueeze(-1) * b.unsqueeze(-2); }
torch::Tensor apply(const torch::Tensor& m, const torch::Tensor& z) {
  return torch::matmul(m, z.unsqueeze(-1)).squeeze(-1);
}

// Copies every parameter that `to` shares by name with `from`, so two rules that register
// different gates still start from the same projections and M_0.
void copy_shared_parameters(const MemoryLayer& from, MemoryLayer& to) {
  torch::NoGradGuard no_grad;
  auto source = from->named_parameters();
  for (auto& p : to->named_parameters())
    if (source.contains(p.key())) p.value().copy_(source[p.key()]);
}

}  // namespace

TEST_CASE("memory: Omega with c=1, identity phi and no NS is Titans LMM written by hand", "[model]") {
  auto layer = make_layer(test_rule("atlas-linear", {"memory.window.c=1", "memory.optimiser=gd-momentum"}), 12, 2,
                          torch::kFloat64);
  auto x = make_input(2, 10, 12, torch::kFloat64);
  torch::NoGradGuard no_grad;
  MemoryState state = layer->initial_state(2);
  torch::Tensor m = state.memory[0], s = torch::zeros_like(m);
  for (int64_t t = 0; t < x.size(1); ++t) {
    auto out = layer->step(x.select(1, t), state);
    const auto& r = out.record;
    // Titans: S_t = β S_{t−1} + θ ∇ℓ, M_t = (1 − forget) M_{t−1} − S_t, ∇ℓ = (M k − v) kᵀ.
    s = mat(r.momentum) * s + mat(r.lr) * outer_product(apply(m, r.phi_k) - r.v, r.phi_k);
    m = mat(r.retain) * m - s;
    CHECK(max_abs_diff(out.y, apply(m, r.phi_q)) < 1e-12);
  }
  CHECK(max_abs_diff(state.memory[0], m) < 1e-12);
  CHECK(max_abs_diff(state.momentum[0], s) < 1e-12);
}

TEST_CASE("memory: Atlas with c=1, identity phi and gd-momentum is the titans-lmm preset", "[model]") {
  auto titans = make_layer(load_memory_rule("titans-lmm"), 16, 2, torch::kFloat64);
  auto atlas = make_layer(load_memory_rule("atlas", {"memory.window.c=1", "memory.feature_map.kind=identity",
                                                     "memory.optimiser=gd-momentum"}),
                          16, 2, torch::kFloat64);
  auto x = make_input(1, 8, 16, torch::kFloat64);
  torch::NoGradGuard no_grad;
  MemoryState a = titans->initial_state(1), b = atlas->initial_state(1);
  CHECK(torch::equal(titans->forward(x, a, 4).y, atlas->forward(x, b, 4).y));
  CHECK(torch::equal(a.memory[1], b.memory[1]));
}

TEST_CASE("memory: with momentum 0 it is the gated delta rule, and dgd is the same rule", "[model]") {
  auto x = make_input(2, 10, 12, torch::kFloat64);
  for (const char* optimiser : {"gd-momentum", "dgd"}) {
    auto layer = make_layer(test_rule("deltanet", {std::string("memory.optimiser=") + optimiser}), 12, 2,
                            torch::kFloat64);
    torch::NoGradGuard no_grad;
    MemoryState state = layer->initial_state(2);
    torch::Tensor m = state.memory[0];
    const auto eye = torch::eye(layer->feature_dim(), torch::kFloat64).to(memscope::test::test_device());
    for (int64_t t = 0; t < x.size(1); ++t) {
      auto out = layer->step(x.select(1, t), state);
      const auto& r = out.record;
      CHECK(torch::all(r.momentum == 0).item<bool>());
      // SPEC §5 dgd: M_t = M_{t−1}(α I − η φφᵀ) + η v φᵀ
      m = torch::matmul(m, mat(r.retain) * eye - mat(r.lr) * outer_product(r.phi_k, r.phi_k)) + mat(r.lr) * outer_product(r.v, r.phi_k);
      INFO("optimiser " << optimiser << " t " << t);
      CHECK(max_abs_diff(out.y, apply(m, r.phi_q)) < 1e-12);
    }
    // dgd keeps no momentum buffer; gd-momentum with β = 0 holds S_t = η_t g_t.
    if (std::string(optimiser) == "dgd") CHECK(torch::all(state.momentum[0] == 0).item<bool>());
  }
}

TEST_CASE("memory: the dot bias without momentum is Hebbian, M_t = alpha M + lr v phi^T", "[model]") {
  auto layer = make_layer(test_rule("hebbian", {"memory.window.c=1"}), 12, 3, torch::kFloat64);
  auto x = make_input(2, 9, 12, torch::kFloat64);
  torch::NoGradGuard no_grad;
  MemoryState state = layer->initial_state(2);
  torch::Tensor m = state.memory[0];
  for (int64_t t = 0; t < x.size(1); ++t) {
    auto out = layer->step(x.select(1, t), state);
    const auto& r = out.record;
    m = mat(r.retain) * m + mat(r.lr) * outer_product(r.v, r.phi_k);
    CHECK(max_abs_diff(out.y, apply(m, r.phi_q)) < 1e-12);
  }
}

TEST_CASE("memory: polynomial phi of degree 1 with a_1 = 1 is the identity, bit for bit", "[model]") {
  auto identity = make_layer(load_memory_rule("omeganet", {"memory.feature_map.kind=identity"}), 12, 2, torch::kFloat64);
  auto poly = make_layer(load_memory_rule("omeganet", {"memory.feature_map.degree=1"}), 12, 2, torch::kFloat64);
  REQUIRE(poly->poly_coefficients.numel() == 1);
  CHECK(poly->poly_coefficients.item<double>() == 1.0);
  copy_shared_parameters(identity, poly);
  auto x = make_input(1, 12, 12, torch::kFloat64);
  torch::NoGradGuard no_grad;
  MemoryState a = identity->initial_state(1), b = poly->initial_state(1);
  auto pa = identity->project(x, a), pb = poly->project(x, b);
  CHECK(torch::equal(pa.phi_k, pb.phi_k));
  CHECK(torch::equal(identity->forward(x, a, 4).y, poly->forward(x, b, 4).y));
  // …and degree 2 is not: the test can tell the maps apart.
  auto poly2 = make_layer(load_memory_rule("omeganet"), 12, 2, torch::kFloat64);
  MemoryState c = poly2->initial_state(1);
  CHECK_FALSE(torch::equal(poly2->project(x, c).phi_k, pa.phi_k));
}

TEST_CASE("memory: gated gamma = 1 equals uniform scaled by c, gamma = 0 writes nothing", "[model]") {
  const int64_t c = 4;
  auto uniform = make_layer(test_rule("omeganet", {"memory.window.c=4"}), 12, 2, torch::kFloat64);
  auto gated = make_layer(test_rule("omeganet", {"memory.window.c=4", "memory.window.gamma=gated"}), 12, 2,
                          torch::kFloat64);
  copy_shared_parameters(uniform, gated);
  auto x = make_input(1, 10, 12, torch::kFloat64);
  torch::NoGradGuard no_grad;

  gated->set_override(Gate::Gamma, {GateOverride::Mode::Constant, {1.0}});
  MemoryState a = uniform->initial_state(1), b = gated->initial_state(1);
  for (int64_t t = 0; t < x.size(1); ++t) {
    auto ra = uniform->step(x.select(1, t), a).record;
    auto rb = gated->step(x.select(1, t), b).record;
    CHECK(max_abs_diff(rb.gradient[0], c * ra.gradient[0]) < 1e-12);
    b = a.clone();  // both steps start from the same state
  }
  // Over a whole run: γ ≡ 1 with lr/c is uniform with lr.
  gated->set_override(Gate::Lr, {GateOverride::Mode::Multiply, {1.0 / c}});
  MemoryState u = uniform->initial_state(1), g = gated->initial_state(1);
  auto yu = uniform->forward(x, u, 1).y, yg = gated->forward(x, g, 1).y;
  CHECK(max_abs_diff(yu, yg) < 1e-12);
  CHECK(max_abs_diff(u.memory[0], g.memory[0]) < 1e-12);

  gated->clear_overrides();
  gated->set_override(Gate::Gamma, {GateOverride::Mode::Constant, {0.0}});
  MemoryState z = gated->initial_state(1);
  for (int64_t t = 0; t < x.size(1); ++t) {
    torch::Tensor before = z.memory[0];
    auto r = gated->step(x.select(1, t), z).record;
    CHECK(torch::equal(z.memory[0], mat(r.retain) * before - torch::zeros_like(before)));
    CHECK(torch::all(z.momentum[0] == 0).item<bool>());
  }
}
