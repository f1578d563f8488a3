// HOPE's dgd on linear memory (SPEC §5, §7; seed 004 changes 3 and 6): per-feature retain and lr,
// the inner loss normalised by its element count, inner gradient clipping. The references are
// written here from the SPEC's matrix form, from the layer's raw parameters, in float64.
#include <catch2/catch.hpp>

#include "memory_test_support.h"
#include "model/util/errors.h"
#include "support/user_error_text.h"

using namespace memscope::model;
using namespace memscope::test;

namespace {

// deltanet with dgd, per-feature gates, the normalised loss and a clip small enough to bite.
const std::vector<std::string> kHopeDgd{"memory.optimiser=dgd", "memory.dgd.per_feature=true",
                                        "memory.inner.normalize=true", "memory.inner.clip=0.35",
                                        "memory.lr.max=100"};

torch::Tensor outer_product(const torch::Tensor& a, const torch::Tensor& b) { return a.unsqueeze(-1) * b.unsqueeze(-2); }
torch::Tensor apply(const torch::Tensor& m, const torch::Tensor& z) { return torch::matmul(m, z.unsqueeze(-1)).squeeze(-1); }

struct Reference {
  torch::Tensor y;        // [B,T,H,d]
  torch::Tensor memory;   // [B,H,d,d] at the end
  int clipped = 0;        // tokens × heads × batch where the clip acted
  int unclipped = 0;
};

// SPEC §5 dgd, per feature: M_t = M_{t−1}(diag α_t − κ_t φ_t (η_t⊙φ_t)ᵀ) + κ_t v_t (η_t⊙φ_t)ᵀ with
// κ_t = min(1, clip/‖g_t‖)/d_v and g_t = (M_{t−1}φ_t − v_t)φ_tᵀ/d_v, everything from the layer's
// parameters (identity φ, no conv, l2 bias, c = 1, read after write). `frozen_every` freezes the
// memory the gradient is taken at for b tokens (the chunkwise form's model, SPEC §9).
Reference dgd_by_hand(const MemoryLayer& layer, const torch::Tensor& x_in, double clip, int64_t frozen_every = 1) {
  torch::NoGradGuard no_grad;
  const auto f64 = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat64); };
  const torch::Tensor x = f64(x_in);
  const int64_t B = x.size(0), T = x.size(1), H = layer->heads(), d = layer->head_dim();
  const double max_lr = layer->rule().max_lr;
  auto heads = [&](const torch::Tensor& w) { return torch::matmul(x, f64(w).t()).view({B, T, H, d}); };
  auto unit = [](const torch::Tensor& z) { return z / z.norm(2, -1, true); };
  const torch::Tensor k = unit(heads(layer->w_k)), q = unit(heads(layer->w_q)), v = heads(layer->w_v);
  const int retain = static_cast<int>(Gate::Retain), lr = static_cast<int>(Gate::Lr);
  // gate_w [H,d,D]: one row per head and feature.
  const torch::Tensor alpha = torch::sigmoid(torch::einsum("btD,hjD->bthj", {x, f64(layer->gate_w[retain])}) +
                                             f64(layer->gate_b[retain]));
  const torch::Tensor eta = max_lr * torch::sigmoid(torch::einsum("btD,hjD->bthj", {x, f64(layer->gate_w[lr])}) +
                                                    f64(layer->gate_b[lr]));
  Reference ref;
  torch::Tensor m = f64(layer->m0).unsqueeze(0).expand({B, H, d, d}).clone(), frozen;
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    if (t % frozen_every == 0) frozen = m;
    const torch::Tensor phi = k.select(1, t), vt = v.select(1, t);
    const torch::Tensor g = outer_product(apply(frozen, phi) - vt, phi) / static_cast<double>(d);
    const torch::Tensor norm = g.flatten(-2).norm(2, -1);
    torch::Tensor kappa = torch::ones_like(norm);
    if (clip > 0) kappa = torch::clamp_max(clip / norm, 1.0);
    ref.clipped += (kappa < 1).sum().item<int>();
    ref.unclipped += (kappa == 1).sum().item<int>();
    kappa = (kappa / static_cast<double>(d)).unsqueeze(-1).unsqueeze(-1);
    const torch::Tensor eta_phi = eta.select(1, t) * phi;
    if (frozen_every == 1) {
      m = torch::matmul(m, torch::diag_embed(alpha.select(1, t)) - kappa * outer_product(phi, eta_phi)) +
          kappa * outer_product(vt, eta_phi);
    } else {  // the gradient point is frozen: M diag α − κ (M_frozen φ − v)(η⊙φ)ᵀ
      m = torch::matmul(m, torch::diag_embed(alpha.select(1, t))) -
          kappa * outer_product(apply(frozen, phi) - vt, eta_phi);
    }
    ys.push_back(apply(m, q.select(1, t)));
  }
  ref.y = torch::stack(ys, 1);
  ref.memory = m;
  return ref;
}

double scale_of(const torch::Tensor& t) { return std::max(1.0, t.abs().max().item<double>()); }

// Copies every parameter that `to` shares by name and shape with `from`.
void copy_shared_parameters(const MemoryLayer& from, MemoryLayer& to) {
  torch::NoGradGuard no_grad;
  auto source = from->named_parameters();
  for (auto& p : to->named_parameters())
    if (source.contains(p.key()) && source[p.key()].sizes() == p.value().sizes()) p.value().copy_(source[p.key()]);
}

}  // namespace

TEST_CASE("dgd: per-feature linear dgd matches an independent float64 computation", "[model]") {
  const MemoryRule rule = load_memory_rule("deltanet", kHopeDgd);
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    auto layer = make_layer(rule, 16, 2, dtype);
    REQUIRE(layer->gate_w[static_cast<int>(Gate::Retain)].sizes() == torch::IntArrayRef({2, 8, 16}));
    REQUIRE(layer->gate_w[static_cast<int>(Gate::Lr)].sizes() == torch::IntArrayRef({2, 8, 16}));
    auto x = make_input(2, 24, 16, dtype);
    const Reference ref = dgd_by_hand(layer, x, rule.inner_clip);
    // The test must see both regimes: the clip acting and not acting.
    CHECK(ref.clipped > 0);
    CHECK(ref.unclipped > 0);
    const double tol = dtype == torch::kFloat64 ? 1e-10 : 1e-4;
    torch::NoGradGuard no_grad;
    MemoryState a = layer->initial_state(2), b = layer->initial_state(2);
    auto seq = layer->forward_sequential(x, a);
    auto chunk = layer->forward(x, b, 1);
    INFO("dtype " << dtype);
    CHECK(max_abs_diff(seq.y.to(torch::kFloat64), ref.y) < tol * scale_of(ref.y));
    CHECK(max_abs_diff(a.memory[0].to(torch::kFloat64), ref.memory) < tol * scale_of(ref.memory));
    CHECK(max_abs_diff(chunk.y.to(torch::kFloat64), ref.y) < tol * scale_of(ref.y));
    CHECK(max_abs_diff(b.memory[0].to(torch::kFloat64), ref.memory) < tol * scale_of(ref.memory));
  }
}

TEST_CASE("dgd: the per-feature features differ, and their means are what the probes see", "[model]") {
  auto layer = make_layer(load_memory_rule("deltanet", kHopeDgd), 16, 2, torch::kFloat64);
  auto x = make_input(1, 6, 16, torch::kFloat64);
  torch::NoGradGuard no_grad;
  MemoryState s = layer->initial_state(1);
  ProjectedTokens p = layer->project(x, s);
  REQUIRE(p.retain_feature.sizes() == torch::IntArrayRef({1, 6, 2, 8}));
  REQUIRE(p.lr_feature.sizes() == torch::IntArrayRef({1, 6, 2, 8}));
  CHECK(max_abs_diff(p.retain, p.retain_feature.mean(-1)) < 1e-15);
  CHECK(max_abs_diff(p.lr, p.lr_feature.mean(-1)) < 1e-15);
  // Real per-feature gates: within a head the features take different values.
  CHECK((p.lr_feature.amax(-1) - p.lr_feature.amin(-1)).min().item<double>() > 1e-6);
  // A scalar rule has none.
  auto scalar = make_layer(load_memory_rule("deltanet", {"memory.optimiser=dgd"}), 16, 2, torch::kFloat64);
  MemoryState t = scalar->initial_state(1);
  CHECK_FALSE(scalar->project(x, t).lr_feature.defined());
}

TEST_CASE("dgd: per-feature gates all equal reduce to the per-head rule, bit for bit in the math", "[model]") {
  // Constant overrides make every feature's α and η the head's value; then per-feature dgd is dgd.
  auto feature = make_layer(test_rule("deltanet", {"memory.optimiser=dgd", "memory.dgd.per_feature=true"}), 16, 2,
                            torch::kFloat64);
  auto head = make_layer(test_rule("deltanet", {"memory.optimiser=dgd"}), 16, 2, torch::kFloat64);
  copy_shared_parameters(feature, head);
  for (auto* l : {&feature, &head}) {
    (*l)->set_override(Gate::Retain, {GateOverride::Mode::Constant, {0.9, 0.7}});
    (*l)->set_override(Gate::Lr, {GateOverride::Mode::Constant, {0.3, 0.6}});
  }
  auto x = make_input(2, 20, 16, torch::kFloat64);
  torch::NoGradGuard no_grad;
  for (int64_t b : {1, 8}) {
    MemoryState a = feature->initial_state(2), c = head->initial_state(2);
    auto ya = feature->forward(x, a, b).y, yc = head->forward(x, c, b).y;
    INFO("b " << b);
    CHECK(max_abs_diff(ya, yc) < 1e-12);
    CHECK(max_abs_diff(a.memory[0], c.memory[0]) < 1e-12);
  }
}

TEST_CASE("dgd: per-feature chunk b equals the loop frozen at chunk starts, and calls split anywhere", "[model]") {
  const MemoryRule rule = load_memory_rule("deltanet", kHopeDgd);
  auto layer = make_layer(rule, 16, 2, torch::kFloat64);
  auto x = make_input(1, 45, 16, torch::kFloat64);
  torch::NoGradGuard no_grad;
  for (int64_t b : {4, 16}) {
    MemoryState s = layer->initial_state(1);
    auto chunk = layer->forward(x, s, b);
    const Reference frozen = dgd_by_hand(layer, x, rule.inner_clip, b);
    INFO("b " << b);
    CHECK(max_abs_diff(chunk.y, frozen.y) < 1e-10 * scale_of(frozen.y));
    CHECK(max_abs_diff(s.memory[0], frozen.memory) < 1e-10 * scale_of(frozen.memory));
    // A different model from b = 1: the comparison above can tell.
    CHECK(max_abs_diff(frozen.y, dgd_by_hand(layer, x, rule.inner_clip).y) > 1e-8);
    // Two calls equal one (the chunk in progress carries over).
    MemoryState two = layer->initial_state(1);
    auto first = layer->forward(x.slice(1, 0, 19), two, b);
    auto second = layer->forward(x.slice(1, 19), two, b);
    CHECK(max_abs_diff(chunk.y, torch::cat({first.y, second.y}, 1)) < 1e-12 * scale_of(chunk.y));
  }
}

TEST_CASE("inner loss: normalize divides loss and gradient by d_v, clip bounds each token's gradient", "[model]") {
  for (const char* preset : {"deltanet", "omeganet", "atlas"}) {
    INFO(preset);
    auto plain = make_layer(test_rule(preset), 16, 2, torch::kFloat64);
    auto normal = make_layer(test_rule(preset, {"memory.inner.normalize=true"}), 16, 2, torch::kFloat64);
    auto clipped = make_layer(test_rule(preset, {"memory.inner.clip=0.05"}), 16, 2, torch::kFloat64);
    auto x = make_input(2, 8, 16, torch::kFloat64);
    torch::NoGradGuard no_grad;
    MemoryState a = plain->initial_state(2), b = normal->initial_state(2), c = clipped->initial_state(2);
    const double d_v = static_cast<double>(plain->head_dim());
    bool clip_acted = false;
    for (int64_t t = 0; t < x.size(1); ++t) {
      MemoryState from = a.clone();
      b = from.clone();
      c = from.clone();
      auto ra = plain->step(x.select(1, t), a).record;
      auto rb = normal->step(x.select(1, t), b).record;
      auto rc = clipped->step(x.select(1, t), c).record;
      CHECK(max_abs_diff(rb.loss_before, ra.loss_before / d_v) < 1e-12);
      CHECK(torch::equal(rb.gamma, ra.gamma));  // normalize scales the loss, never the recorded γ
      torch::Tensor norm_sq = torch::zeros_like(ra.loss_before);
      for (size_t i = 0; i < ra.gradient.size(); ++i) {
        CHECK(max_abs_diff(rb.gradient[i], ra.gradient[i] / d_v) < 1e-12);
        norm_sq = norm_sq + ra.gradient[i].pow(2).sum({-2, -1});
      }
      // clip: g·min(1, 0.05/‖g‖), the norm over all of a head's weights.
      const torch::Tensor factor = torch::clamp_max(0.05 / norm_sq.sqrt(), 1.0);
      clip_acted = clip_acted || (factor < 1).any().item<bool>();
      for (size_t i = 0; i < ra.gradient.size(); ++i)
        CHECK(max_abs_diff(rc.gradient[i], ra.gradient[i] * factor.unsqueeze(-1).unsqueeze(-1)) < 1e-12);
    }
    CHECK(clip_acted);
  }
}

TEST_CASE("inner loss: with normalize and clip, chunk 1 equals the sequential step and the dual form the full one",
          "[model]") {
  for (const char* preset : {"deltanet", "omeganet", "titans-lmm", "atlas", "ttt-linear"}) {
    auto layer = make_layer(test_rule(preset, {"memory.inner.normalize=true", "memory.inner.clip=0.01"}), 16, 2,
                            torch::kFloat64);
    auto x = make_input(2, 20, 16, torch::kFloat64);
    torch::NoGradGuard no_grad;
    MemoryState a = layer->initial_state(2), b = layer->initial_state(2);
    auto seq = layer->forward_sequential(x, a);
    auto chunk = layer->forward(x, b, 1);
    INFO(preset);
    CHECK(max_abs_diff(seq.y, chunk.y) < 1e-10 * scale_of(seq.y));
    for (size_t i = 0; i < a.memory.size(); ++i) CHECK(max_abs_diff(a.memory[i], b.memory[i]) < 1e-10);
    if (layer->rule().structure == Structure::Linear) {  // the fast dual form clips through ψ's Gram matrices
      MemoryState f = layer->initial_state(2), m = layer->initial_state(2);
      auto fast = layer->forward(x, f, 8, /*record=*/false);
      auto full = layer->forward(x, m, 8, /*record=*/true);
      CHECK(max_abs_diff(fast.y, full.y) < 1e-10 * scale_of(full.y));
      CHECK(max_abs_diff(f.memory[0], m.memory[0]) < 1e-10);
    }
  }
}

TEST_CASE("dgd: per-feature gates receive outer gradients through the chunkwise form", "[model]") {
  auto layer = make_layer(load_memory_rule("deltanet", kHopeDgd), 16, 2, torch::kFloat64);
  auto x = make_input(1, 12, 16, torch::kFloat64);
  MemoryState s = layer->initial_state(1);
  layer->forward(x, s, 4).y.pow(2).sum().backward();
  for (Gate g : {Gate::Retain, Gate::Lr}) {
    const auto& w = layer->gate_w[static_cast<int>(g)];
    INFO(to_string(g));
    REQUIRE(w.grad().defined());
    // Every feature row of every head is trained.
    CHECK(w.grad().abs().sum(-1).min().item<double>() > 0);
  }
  CHECK(layer->m0.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("dgd: on MLP memory the gates and both initial weights receive outer gradients through the chunkwise form",
          "[model]") {
  auto layer = make_layer(load_memory_rule("titans-lmm", {"memory.optimiser=dgd", "memory.dgd.per_feature=true"}), 16, 2,
                          torch::kFloat64);
  auto x = make_input(1, 12, 16, torch::kFloat64);
  MemoryState s = layer->initial_state(1);
  layer->forward(x, s, 4).y.pow(2).sum().backward();
  for (Gate g : {Gate::Retain, Gate::Lr}) {
    const auto& w = layer->gate_w[static_cast<int>(g)];
    INFO(to_string(g));
    REQUIRE(w.grad().defined());
    CHECK(w.grad().abs().sum(-1).min().item<double>() > 0);
  }
  for (const auto* w : {&layer->w1_0, &layer->w2_0}) {
    REQUIRE(w->grad().defined());
    CHECK(w->grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("dgd: per_feature needs the dgd optimiser and a linear retention", "[model]") {
  CHECK_THAT(error_of([] { load_memory_rule("deltanet", {"memory.dgd.per_feature=true"}); }),
             Catch::Contains("memory.dgd.per_feature") && Catch::Contains("dgd"));
  CHECK_THAT(error_of([] {
               load_memory_rule("memora", {"memory.optimiser=dgd", "memory.dgd.per_feature=true"});
             }),
             Catch::Contains("memory.dgd.per_feature") && Catch::Contains("softmax"));
  CHECK_THAT(error_of([] { load_memory_rule("deltanet", {"memory.inner.clip=-1"}); }),
             Catch::Contains("memory.inner.clip"));
}

TEST_CASE("dgd on MLP memory: k̄² is the γ-weighted mean of φ² over the window's existing tokens", "[model]") {
  // SPEC §5 with c = 3 and decay weights (d^{t−i}, normalised over the full window): k̄²_t =
  // Σ_i w_i φ_i² / Σ_i w_i over the tokens i ≥ 0 of the window, so the first token's k̄² is its own
  // φ². memory.inner.normalize changes neither k̄² nor γ.
  const std::vector<std::string> set{"memory.conv=false", "memory.optimiser=dgd", "memory.window.c=3",
                                     "memory.window.gamma=decay", "memory.window.decay=0.5"};
  std::vector<std::string> normalised = set;
  normalised.push_back("memory.inner.normalize=true");
  auto layer = make_layer(test_rule("atlas", set), 16, 2, torch::kFloat64);
  auto normal = make_layer(test_rule("atlas", normalised), 16, 2, torch::kFloat64);
  auto x = make_input(1, 5, 16, torch::kFloat64);
  torch::NoGradGuard no_grad;
  MemoryState a = layer->initial_state(1), b = normal->initial_state(1);
  const double by_age[3] = {0.25 / 1.75, 0.5 / 1.75, 1.0 / 1.75};  // oldest first: 0.5², 0.5, 1 over their sum
  std::vector<torch::Tensor> phi;
  for (int64_t t = 0; t < 5; ++t) {
    auto ra = layer->step(x.select(1, t), a).record;
    auto rb = normal->step(x.select(1, t), b).record;
    phi.push_back(ra.phi_k);
    torch::Tensor weighted = torch::zeros_like(ra.phi_k);
    double total = 0;
    for (int64_t j = 0; j < 3; ++j) {
      const int64_t i = t - 2 + j;
      if (i < 0) continue;
      weighted = weighted + by_age[j] * phi[static_cast<size_t>(i)].pow(2);
      total += by_age[j];
    }
    INFO("token " << t);
    REQUIRE(ra.key_squares.defined());
    CHECK(max_abs_diff(ra.key_squares, weighted / total) < 1e-14);
    if (t == 0) CHECK(max_abs_diff(ra.key_squares, ra.phi_k.pow(2)) < 1e-15);
    CHECK(max_abs_diff(rb.key_squares, ra.key_squares) < 1e-15);
    CHECK(torch::equal(rb.gamma, ra.gamma));
  }
}
