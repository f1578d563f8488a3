// The continuum memory system (SPEC §7, seed 004 changes 4 and 5): the batched form equals the
// per-token step, levels update only at the ends of their periods counted from the stream start,
// any split of the stream into calls gives the same result, updates run in eval mode and without
// gradients, and the outer loss reaches every level through the updates. The single-level
// reference is written here from the header's equations.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <optional>

#include "model/memory/continuum_memory.h"
#include "model/util/cpu_kernels.h"
#include "model/util/errors.h"
#include "support/test_device.h"
#include "support/under_autocast.h"
#include "support/user_error_text.h"

using namespace memscope::model;
using memscope::test::error_of;

namespace {

const CmsVariant kVariants[] = {CmsVariant::Sequential, CmsVariant::Independent, CmsVariant::Nested};

ContinuumMemory make_cms(std::vector<int64_t> periods, CmsVariant variant = CmsVariant::Sequential,
                         double clip = 0.0, int64_t d = 8) {
  torch::manual_seed(5);
  CmsOptions o;
  o.d_model = d;
  o.periods = std::move(periods);
  o.variant = variant;
  o.max_lr = 50.0;  // lr ≈ 0.5 so that updates are visible
  o.inner_clip = clip;
  ContinuumMemory cms(o);
  cms->to(memscope::test::test_device(), torch::kFloat64);
  return cms;
}

torch::Tensor input(int64_t batch, int64_t tokens, int64_t d, uint64_t seed = 3) {
  torch::manual_seed(seed);
  return torch::randn({batch, tokens, d}, torch::kFloat64).to(memscope::test::test_device());
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

double state_diff(const CmsState& a, const CmsState& b) {
  double worst = 0;
  for (size_t l = 0; l < a.levels.size(); ++l)
    for (size_t i = 0; i < 2; ++i) {
      worst = std::max(worst, max_abs_diff(a.levels[l].weights[i], b.levels[l].weights[i]));
      worst = std::max(worst, max_abs_diff(a.levels[l].accumulated[i], b.levels[l].accumulated[i]));
    }
  return worst;
}

// M(z) = z + LN(W1 GELU(W2 z)) for one sequence: z [n,D], w1 [D,4D], w2 [4D,D] (SPEC §3).
torch::Tensor mlp_by_hand(const torch::Tensor& z, const torch::Tensor& w1, const torch::Tensor& w2,
                          const torch::Tensor& ln_w, const torch::Tensor& ln_b) {
  torch::Tensor o = torch::matmul(torch::gelu(torch::matmul(z, w2.t())), w1.t());
  torch::Tensor mu = o.mean(-1, true), var = (o - mu).pow(2).mean(-1, true);
  return z + (o - mu) / torch::sqrt(var + 1e-5) * ln_w + ln_b;
}

// One level, one sequence, token by token: read at W; g_t = ∇_W ½‖M_W(W_k z_t) − W_v z_t‖²/D;
// G += min(1, clip/‖g_t‖) η_t g_t; W ← W − G after every C-th token of the stream.
torch::Tensor level_by_hand(const ContinuumMemory& cms, const torch::Tensor& z, double clip,
                            std::vector<torch::Tensor>& w_end) {
  const int64_t C = cms->options().periods[0], D = z.size(-1);
  const torch::Tensor wk = cms->w_k[0].detach(), wv = cms->w_v[0].detach();
  const torch::Tensor ln_w = cms->ln_weight[0].detach()[0], ln_b = cms->ln_bias[0].detach()[0];
  torch::Tensor w1 = cms->w1_0[0].detach()[0].clone(), w2 = cms->w2_0[0].detach()[0].clone();
  torch::Tensor g1 = torch::zeros_like(w1), g2 = torch::zeros_like(w2);
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < z.size(0); ++t) {
    const torch::Tensor zt = z[t].unsqueeze(0);
    ys.push_back(mlp_by_hand(zt, w1, w2, ln_w, ln_b)[0]);
    std::vector<torch::Tensor> g;
    {
      torch::AutoGradMode grad_on(true);
      torch::Tensor a = w1.clone().requires_grad_(true), b = w2.clone().requires_grad_(true);
      torch::Tensor loss = 0.5 *
                           (mlp_by_hand(torch::matmul(zt, wk.t()), a, b, ln_w, ln_b) - torch::matmul(zt, wv.t()))
                               .pow(2)
                               .sum() /
                           static_cast<double>(D);
      g = torch::autograd::grad({loss}, {a, b});
    }
    const double norm = std::sqrt(g[0].pow(2).sum().item<double>() + g[1].pow(2).sum().item<double>());
    const double kappa = clip > 0 ? std::min(1.0, clip / norm) : 1.0;
    const double eta = cms->options().max_lr *
                       torch::sigmoid(torch::dot(z[t], cms->lr_w[0].detach()) + cms->lr_b[0].detach()[0]).item<double>();
    g1 = g1 + kappa * eta * g[0];
    g2 = g2 + kappa * eta * g[1];
    if ((t + 1) % C == 0) {
      w1 = w1 - g1;
      w2 = w2 - g2;
      g1.zero_();
      g2.zero_();
    }
  }
  w_end = {w1, w2};
  return torch::stack(ys);
}

}  // namespace

TEST_CASE("cms: one level equals an independent float64 computation", "[model]") {
  for (int64_t C : {1, 3}) {
    for (double clip : {0.0, 0.05}) {
      auto cms = make_cms({C}, CmsVariant::Sequential, clip);
      auto x = input(2, 10, 8);
      torch::NoGradGuard no_grad;
      CmsState s = cms->initial_state(2);
      auto y = cms->forward(x, s);
      INFO("C " << C << " clip " << clip);
      for (int64_t b = 0; b < 2; ++b) {
        std::vector<torch::Tensor> w;
        torch::Tensor ref = level_by_hand(cms, x[b], clip, w);
        CHECK(max_abs_diff(y[b], ref) < 1e-10);
        CHECK(max_abs_diff(s.levels[0].weights[0][b][0], w[0]) < 1e-10);
        CHECK(max_abs_diff(s.levels[0].weights[1][b][0], w[1]) < 1e-10);
      }
    }
  }
}

TEST_CASE("cms: the batched form equals the per-token step, every variant", "[model]") {
  for (CmsVariant variant : kVariants) {
    auto cms = make_cms({1, 2, 3, 5}, variant, 0.1);
    auto x = input(2, 23, 8);
    torch::NoGradGuard no_grad;
    CmsState a = cms->initial_state(2), b = cms->initial_state(2);
    auto y = cms->forward(x, a);
    std::vector<torch::Tensor> ys;
    for (int64_t t = 0; t < x.size(1); ++t) ys.push_back(cms->step(x.select(1, t), b));
    INFO(to_string(variant));
    CHECK(max_abs_diff(y, torch::stack(ys, 1)) < 1e-10);
    CHECK(state_diff(a, b) < 1e-10);
    CHECK(a.tokens == 23);
    CHECK(b.tokens == 23);
  }
}

TEST_CASE("cms: one token a call without gradients (the fused step) equals the ATen form and float64",
          "[model]") {
  // The model's step calls forward() one token at a time under no_grad; on the CPU in float32 each
  // level's token is fused_cms_step.cpp's loops. Periods 1, 2 and 3 take all three of its writes:
  // W directly (G zero at a period's end), G alone (inside a period), G then W (a period's end).
  memscope::test::ScopedCpuDevice cpu;  // the fused kernels are CPU code
  if (!memscope::test::cpu_kernels_testable()) return;
  for (CmsVariant variant : kVariants)
    for (double clip : {0.0, 0.3}) {
      INFO(to_string(variant) << " clip " << clip);
      auto cms = make_cms({1, 2, 3}, variant, clip, 16);
      const torch::Tensor x64 = input(2, 13, 16);
      torch::NoGradGuard no_grad;
      CmsState reference = cms->initial_state(2);  // float64: step(), its inner gradients by autograd
      std::vector<torch::Tensor> want;
      for (int64_t t = 0; t < x64.size(1); ++t) want.push_back(cms->step(x64.select(1, t), reference));
      cms->to(torch::kFloat32);
      const torch::Tensor x = x64.to(torch::kFloat32);
      // Every state on the way is kept beside a clone, as the engine keeps them to rewind to.
      std::vector<CmsState> kept, copies;
      auto one_by_one = [&](CmsState& s) {
        std::vector<torch::Tensor> ys;
        for (int64_t t = 0; t < x.size(1); ++t) {
          kept.push_back(s);
          copies.push_back(s.clone());
          ys.push_back(cms->forward(x.narrow(1, t, 1), s));
        }
        return torch::cat(ys, 1).to(torch::kFloat64);
      };
      CmsState fused = cms->initial_state(2), aten = cms->initial_state(2);
      CHECK(cms->fused_level_step_applies(0, x.narrow(1, 0, 1), fused.levels[0]));
      const torch::Tensor y_fused = one_by_one(fused);
      torch::Tensor y_aten;
      {
        const ScopedAtenForms aten_forms;
        CHECK_FALSE(cms->fused_level_step_applies(0, x.narrow(1, 0, 1), aten.levels[0]));
        y_aten = one_by_one(aten);
      }
      CHECK(max_abs_diff(y_fused, y_aten) > 0);  // the fused step ran: its rounding differs somewhere
      CHECK(max_abs_diff(y_fused, y_aten) < 2e-5);
      CHECK(max_abs_diff(y_fused, torch::stack(want, 1)) < 2e-5);
      for (size_t l = 0; l < fused.levels.size(); ++l) {
        CHECK(fused.levels[l].accumulated_zero == aten.levels[l].accumulated_zero);
        for (size_t i = 0; i < 2; ++i) {
          CHECK(max_abs_diff(fused.levels[l].weights[i].to(torch::kFloat64), reference.levels[l].weights[i]) <
                2e-5);
          CHECK(max_abs_diff(fused.levels[l].accumulated[i].to(torch::kFloat64),
                             reference.levels[l].accumulated[i]) < 2e-5);
          CHECK(max_abs_diff(fused.levels[l].weights[i], aten.levels[l].weights[i]) < 2e-5);
        }
      }
      // Nothing was written in place: every state kept on the way still equals its clone.
      for (size_t t = 0; t < kept.size(); ++t) CHECK(state_diff(kept[t], copies[t]) == 0);
      // The writes are not vanishing: the last level's W moved from W_0.
      CHECK(max_abs_diff(fused.levels[2].weights[0],
                         cms->w1_0[2].unsqueeze(0).expand_as(fused.levels[2].weights[0])) > 1e-3);
    }
}

TEST_CASE("cms: each level updates only at the ends of its periods, counted from the stream start", "[model]") {
  const std::vector<int64_t> periods{1, 4, 6};
  auto cms = make_cms(periods);
  auto x = input(1, 30, 8);
  torch::NoGradGuard no_grad;
  CmsState s = cms->initial_state(1);
  cms->forward(x.slice(1, 0, 7), s);  // the traced call starts mid-period for levels 2 and 3
  const int64_t start = 7;
  std::vector<torch::Tensor> before;
  for (const auto& level : s.levels) before.push_back(level.weights[0].clone());
  CmsTrace trace;
  cms->forward(x.slice(1, 7), s, &trace);
  REQUIRE(trace.tick.size() == periods.size());
  for (size_t l = 0; l < periods.size(); ++l) {
    const torch::Tensor& w = trace.weights[l][0];  // [1,T,D,4D]
    REQUIRE(w.size(1) == 23);
    int updates = 0;
    for (int64_t t = 0; t < 23; ++t) {
      const bool tick = (start + t + 1) % periods[l] == 0;
      INFO("level " << l << " token " << t);
      CHECK(trace.tick[l][t].item<double>() == (tick ? 1.0 : 0.0));
      const torch::Tensor previous = t == 0 ? before[l][0][0] : w[0][t - 1];
      if (tick) {
        CHECK_FALSE(torch::equal(w[0][t], previous));  // the update is real
        ++updates;
      } else {
        CHECK(torch::equal(w[0][t], previous));  // between updates it only reads
      }
    }
    CHECK(updates == (start + 23) / periods[l] - start / periods[l]);
  }
  // After the last token the state holds the traced weights.
  for (size_t l = 0; l < periods.size(); ++l) CHECK(torch::equal(s.levels[l].weights[0][0][0], trace.weights[l][0][0][22]));
}

TEST_CASE("cms: splitting the stream into calls of any lengths gives identical results", "[model]") {
  for (CmsVariant variant : kVariants) {
    auto cms = make_cms({1, 4, 32, 128}, variant, 0.5);
    auto x = input(2, 150, 8);
    torch::NoGradGuard no_grad;
    CmsState whole = cms->initial_state(2);
    const torch::Tensor y = cms->forward(x, whole);
    const std::vector<std::vector<int64_t>> splits{{1, 149}, {31, 2, 95, 22}, {64, 64, 22}, {127, 1, 1, 21},
                                                   {5, 7, 11, 13, 17, 19, 23, 29, 26}};
    for (const auto& split : splits) {
      CmsState parts = cms->initial_state(2);
      std::vector<torch::Tensor> ys;
      int64_t t = 0;
      for (int64_t n : split) {
        ys.push_back(cms->forward(x.narrow(1, t, n), parts));
        t += n;
      }
      REQUIRE(t == 150);
      INFO(to_string(variant) << " split of " << split.size());
      // float64 rounding: LibTorch 2.x (CPU and CUDA) picks kernels by a call's length, and
      // those round differently (1.13 on the CPU agrees bit for bit).
      const double tol = 1e-10;
      CHECK(max_abs_diff(y, torch::cat(ys, 1)) < tol);
      CHECK(state_diff(whole, parts) < tol);
    }
    // The 128-period level ticked once in 150 tokens: its W moved away from W_0.
    CHECK_FALSE(torch::equal(whole.levels[3].weights[0][0][0], cms->w1_0[3][0]));
  }
}

TEST_CASE("cms: a state that does not know its sums are zero writes the same values", "[model]") {
  // CmsLevelState::accumulated_zero lets a stretch that ends its period write W directly; without
  // it (a state made elsewhere) the general form runs, W − (G + Σ), and must agree to the bit.
  for (CmsVariant variant : kVariants) {
    auto cms = make_cms({1, 4, 32}, variant, 0.5);
    auto x = input(2, 70, 8);
    CmsState known = cms->initial_state(2), unknown = cms->initial_state(2);
    for (auto& level : unknown.levels) level.accumulated_zero = false;
    const torch::Tensor y_known = cms->forward(x.narrow(1, 0, 37), known);
    const torch::Tensor y_unknown = cms->forward(x.narrow(1, 0, 37), unknown);
    INFO(to_string(variant));
    CHECK(torch::equal(y_known, y_unknown));
    CHECK(state_diff(known, unknown) == 0.0);
    for (auto& level : unknown.levels) level.accumulated_zero = false;  // again, mid-period
    CHECK(torch::equal(cms->forward(x.narrow(1, 37, 33), known), cms->forward(x.narrow(1, 37, 33), unknown)));
    CHECK(state_diff(known, unknown) == 0.0);
  }
}

TEST_CASE("cms: nested restarts each level from the next slower level whenever that one updates", "[model]") {
  // Reference: the sequential chain token by token (tested above against the by-hand level),
  // with the nested reset written here: after the token at position p, for ℓ from slow to fast,
  // if level ℓ+1 updated at p then level ℓ takes its weights and G ← 0.
  const std::vector<int64_t> periods{1, 3, 6};
  auto nested = make_cms(periods, CmsVariant::Nested, 0.1);
  auto chain = make_cms(periods, CmsVariant::Sequential, 0.1);  // the same seed: the same parameters
  auto x = input(2, 20, 8);
  torch::NoGradGuard no_grad;
  CmsState ref = chain->initial_state(2);
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < x.size(1); ++t) {
    ys.push_back(chain->step(x.select(1, t), ref));
    for (int l = 1; l >= 0; --l) {
      if ((t + 1) % periods[static_cast<size_t>(l + 1)] != 0) continue;
      auto& fast = ref.levels[static_cast<size_t>(l)];
      for (size_t i = 0; i < 2; ++i) {
        fast.weights[i] = ref.levels[static_cast<size_t>(l + 1)].weights[i].clone();
        fast.accumulated[i] = torch::zeros_like(fast.accumulated[i]);
      }
    }
  }
  CmsState s = nested->initial_state(2);
  CmsTrace trace;
  const torch::Tensor y = nested->forward(x, s, &trace);
  CHECK(max_abs_diff(y, torch::stack(ys, 1)) < 1e-12);
  CHECK(state_diff(s, ref) < 1e-12);

  // The trace shows the restarts: after token 2 level 0 holds level 1's weights, after token 5
  // both faster levels hold level 2's; and the ticks stay each level's own updates.
  auto w_after = [&](int level, int64_t t) { return trace.weights[static_cast<size_t>(level)][0].select(1, t); };
  CHECK(torch::equal(w_after(0, 2), w_after(1, 2)));
  CHECK_FALSE(torch::equal(w_after(1, 2), w_after(2, 2)));
  CHECK(torch::equal(w_after(0, 5), w_after(2, 5)));
  CHECK(torch::equal(w_after(1, 5), w_after(2, 5)));
  CHECK_FALSE(torch::equal(w_after(0, 6), w_after(2, 6)));  // level 0 learns on from there
  for (size_t l = 0; l < periods.size(); ++l)
    for (int64_t t = 0; t < 20; ++t) CHECK(trace.tick[l][t].item<double>() == ((t + 1) % periods[l] == 0 ? 1.0 : 0.0));

  // The restarts are what makes it differ from the plain chain …
  CmsState plain = chain->initial_state(2);
  CHECK(max_abs_diff(chain->forward(x, plain), y) > 1e-6);
  // … so before any level above the first updates, nested and sequential are the same model.
  auto late_nested = make_cms({1, 50}, CmsVariant::Nested, 0.1), late_chain = make_cms({1, 50}, CmsVariant::Sequential, 0.1);
  CmsState a = late_nested->initial_state(2), b = late_chain->initial_state(2);
  CHECK(torch::equal(late_nested->forward(x, a), late_chain->forward(x, b)));
}

TEST_CASE("cms: training writes exactly what inference writes, both forms, every variant", "[model]") {
  // With grad mode on the inner gradient must still be ∂ℓ/∂W at W's use as the memory: in nested,
  // a level restarted from the slower level's weights feeds that level's keys, and a gradient
  // taken with respect to the weights themselves would add that path (it did, before the fix).
  for (CmsVariant variant : kVariants) {
    auto cms = make_cms({1, 3, 6}, variant, 0.2);
    auto x = input(2, 20, 8);
    auto run = [&](bool grad, bool batched) {
      torch::AutoGradMode mode(grad);
      CmsState s = cms->initial_state(2);
      torch::Tensor y;
      if (batched) {
        y = cms->forward(x, s);
      } else {
        std::vector<torch::Tensor> ys;
        for (int64_t t = 0; t < x.size(1); ++t) ys.push_back(cms->step(x.select(1, t), s));
        y = torch::stack(ys, 1);
      }
      return std::make_pair(y.detach(), s.detached());
    };
    for (bool batched : {true, false}) {
      const auto train = run(true, batched), infer = run(false, batched);
      INFO(to_string(variant) << (batched ? " batched" : " step"));
      CHECK(max_abs_diff(train.first, infer.first) < 1e-12);
      CHECK(state_diff(train.second, infer.second) < 1e-12);
    }
  }
}

TEST_CASE("cms: variants parse by name, with an error that names the key", "[model]") {
  for (CmsVariant v : kVariants) CHECK(parse_cms_variant(to_string(v), "model.cms.variant") == v);
  CHECK_THAT(error_of([] { parse_cms_variant("parallel", "model.cms.variant"); }),
             Catch::Contains("model.cms.variant") && Catch::Contains("nested"));
}

TEST_CASE("cms: memories update in eval mode and without gradients", "[model]") {
  auto cms = make_cms({1, 2});
  cms->eval();
  auto x = input(1, 4, 8);
  torch::NoGradGuard no_grad;
  CmsState s = cms->initial_state(1);
  cms->forward(x, s);
  for (int64_t l = 0; l < 2; ++l) {
    INFO("level " << l);
    CHECK_FALSE(torch::equal(s.levels[static_cast<size_t>(l)].weights[0][0], cms->w1_0[static_cast<size_t>(l)]));
    CHECK_FALSE(torch::equal(s.levels[static_cast<size_t>(l)].weights[1][0], cms->w2_0[static_cast<size_t>(l)]));
  }
}

TEST_CASE("cms: the outer loss reaches every level's parameters through its updates", "[model]") {
  auto cms = make_cms({1, 2, 4});
  auto x = input(1, 9, 8);
  CmsState s = cms->initial_state(1);
  cms->forward(x, s).pow(2).sum().backward();
  for (const auto& p : cms->named_parameters()) {
    INFO(p.key());
    REQUIRE(p.value().grad().defined());
    // w_k, w_v and the lr gate act only through the updates: a gradient means the updates are differentiable.
    CHECK(p.value().grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("cms: the outer gradient of the batched form equals the per-token step's", "[model]") {
  // Both forms are differentiable (create_graph through every inner gradient); the outer
  // gradient through the updates must not depend on which form ran.
  for (CmsVariant variant : kVariants) {
    auto cms = make_cms({1, 4}, variant, 0.3);
    auto x = input(2, 11, 8);
    auto run = [&](bool batched) {
      cms->zero_grad();
      CmsState s = cms->initial_state(2);
      torch::Tensor y;
      if (batched) {
        y = cms->forward(x, s);
      } else {
        std::vector<torch::Tensor> ys;
        for (int64_t t = 0; t < x.size(1); ++t) ys.push_back(cms->step(x.select(1, t), s));
        y = torch::stack(ys, 1);
      }
      y.pow(2).sum().backward();
      std::vector<torch::Tensor> grads;
      for (const auto& p : cms->parameters()) grads.push_back(p.grad().clone());
      return grads;
    };
    const auto batched = run(true), stepped = run(false);
    INFO(to_string(variant));
    for (size_t i = 0; i < batched.size(); ++i) {
      const double scale = std::max(1.0, stepped[i].abs().max().item<double>());
      CHECK(max_abs_diff(batched[i], stepped[i]) < 1e-9 * scale);
    }
  }
}

TEST_CASE("cms: float32 outer gradients through the updates match float64", "[model]") {
  // Guards the stretch's products in float32, on both routes: batched_matmul.h's loop, and
  // at::matmul's bmm (ScopedAtenForms, the GPU's route), whose float32 double backward LibTorch 1.13
  // got wrong by orders of magnitude when the inner gradient came from autograd; float64 was right.
  auto cms = make_cms({1, 16}, CmsVariant::Sequential, 0.0, 16);
  auto x = input(2, 40, 16);
  auto gradients = [&](torch::Dtype dtype) {
    cms->to(dtype);
    cms->zero_grad();
    CmsState s = cms->initial_state(2);
    cms->forward(x.to(dtype), s).pow(2).mean().backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : cms->parameters()) g.push_back(p.grad().to(torch::kFloat64));
    return g;
  };
  const std::vector<torch::Tensor> reference = gradients(torch::kFloat64);
  for (const bool aten_forms : {false, true}) {
    INFO((aten_forms ? "at::matmul" : "batched_matmul"));
    std::optional<ScopedAtenForms> forms;
    if (aten_forms) forms.emplace();
    const std::vector<torch::Tensor> ours = gradients(torch::kFloat32);
    for (size_t i = 0; i < reference.size(); ++i) {
      const double scale = std::max(1e-3, reference[i].abs().max().item<double>());
      CHECK(max_abs_diff(reference[i], ours[i]) < 1e-3 * scale);
    }
  }
}

TEST_CASE("cms: periods parse from a comma-separated list, with errors that name the key", "[model]") {
  CHECK(parse_cms_periods("1,4,32,128", "cms.periods") == std::vector<int64_t>{1, 4, 32, 128});
  CHECK(parse_cms_periods(" 2 , 8 ", "cms.periods") == std::vector<int64_t>{2, 8});
  for (const char* bad : {"", "1,,4", "0,4", "1,x", "1.5", "1,2,3,4,5,6,7,8,9"})
    CHECK_THAT(error_of([&] { parse_cms_periods(bad, "cms.periods"); }), Catch::Contains("cms.periods"));
}

TEST_CASE("cms: under bf16 autocast the levels run in float32, both forms, every variant", "[model]") {
  // train.bf16_autocast: a level reads with its memory and writes into it, so autocast is off
  // inside (continuum_memory.cpp); the same bits as the float32 run, autocast on again after. In
  // bf16 the output was 1.8–3.4× as far off as rounding the input to bf16 makes it.
  for (auto variant : kVariants) {
    auto cms = make_cms({1, 4}, variant, 0.5, 16);
    cms->to(torch::kFloat32);
    const torch::Tensor x = input(2, 19, 16).to(torch::kFloat32);
    CmsState plain = cms->initial_state(2), autocast = cms->initial_state(2);
    auto run = [&](CmsState& s) {
      std::vector<torch::Tensor> ys{cms->forward(x.narrow(1, 0, 9), s)};
      for (int64_t t = 9; t < 12; ++t) ys.push_back(cms->step(x.select(1, t), s).unsqueeze(1));
      ys.push_back(cms->forward(x.narrow(1, 12, 7), s));
      return torch::cat(ys, 1);
    };
    const torch::Tensor want = run(plain);
    const torch::Tensor got = memscope::test::under_bf16_autocast([&] { return run(autocast); });
    INFO("variant " << to_string(variant));
    CHECK(got.scalar_type() == torch::kFloat32);
    CHECK(torch::equal(got, want));
    for (size_t l = 0; l < plain.levels.size(); ++l)
      for (size_t i = 0; i < 2; ++i)
        CHECK(torch::equal(autocast.levels[l].weights[i], plain.levels[l].weights[i]));
  }
}
