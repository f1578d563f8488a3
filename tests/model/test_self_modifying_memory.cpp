// HOPE's self-modifying memories (SPEC §7, seed 004 changes 1–4) and the diagonal dgd
// preconditioner for MLP memories (seed 004 change 2). References are written here, in float64,
// from the seed's formulas and the header's equations.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "model/memory/dgd_preconditioner.h"
#include "model/memory/self_modifying_memory.h"
#include "model/util/cpu_kernels.h"
#include "support/test_device.h"
#include "support/under_autocast.h"

using namespace memscope::model;

namespace {

constexpr int64_t kD = 6;

SelfModifyingMemory make_selfmod(double clip = 0.0, double self_lr_scale = 1.0) {
  torch::manual_seed(9);
  SelfModOptions o;
  o.d_model = kD;
  o.max_lr = 30.0;  // η ≈ 0.3: writes big enough to see
  o.inner_clip = clip;
  o.self_lr_scale = self_lr_scale;
  SelfModifyingMemory m(o);
  m->to(memscope::test::test_device(), torch::kFloat64);
  return m;
}

torch::Tensor input(int64_t batch, int64_t tokens) {
  torch::manual_seed(4);
  return torch::randn({batch, tokens, kD}, torch::kFloat64).to(memscope::test::test_device());
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

// SPEC §3 for one sequence: z [d], w1 [d,4d], w2 [4d,d], LN with affine [d].
torch::Tensor mlp_by_hand(const torch::Tensor& z, const torch::Tensor& w1, const torch::Tensor& w2,
                          const torch::Tensor& ln_w, const torch::Tensor& ln_b) {
  torch::Tensor o = torch::matmul(w1, torch::gelu(torch::matmul(w2, z)));
  torch::Tensor mu = o.mean(), var = (o - mu).pow(2).mean();
  return z + (o - mu) / torch::sqrt(var + 1e-5) * ln_w + ln_b;
}

}  // namespace

TEST_CASE("dgd preconditioner: the diagonal update matches seed 004's formula", "[model]") {
  // The seed's layout: w1 [hidden, D] (its input side D: our W_2), w2 [D, hidden] (our W_1);
  // k, alpha, lr [B, N, D] averaged over batch and tokens to per-feature vectors.
  torch::manual_seed(2);
  const int64_t B = 2, N = 3, D = 4, hidden = 16;
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor k = torch::randn({B, N, D}, opts), alpha = torch::rand({B, N, D}, opts),
                      lr = 0.1 * torch::rand({B, N, D}, opts);
  const torch::Tensor seed_w1 = torch::randn({hidden, D}, opts), seed_w2 = torch::randn({D, hidden}, opts);
  const torch::Tensor grad_w1 = torch::randn({hidden, D}, opts), grad_w2 = torch::randn({D, hidden}, opts);

  const torch::Tensor k_sq = k.pow(2).mean(std::vector<int64_t>{0, 1}), alpha_feat = alpha.mean(std::vector<int64_t>{0, 1}),
                      lr_feat = lr.mean(std::vector<int64_t>{0, 1});
  auto ours = dgd_mlp_update({seed_w2, seed_w1}, {grad_w2, grad_w1}, k_sq, alpha_feat, lr_feat);

  // precond = alpha_feat - lr_feat * k_sq
  // new_w1 = w1 * precond.unsqueeze(0) - lr_feat.unsqueeze(0) * grad   (columns)
  // new_w2 = w2 * precond.unsqueeze(1) - lr_feat.unsqueeze(1) * grad   (rows)
  double worst = 0;
  for (int64_t f = 0; f < D; ++f) {
    const double a = alpha_feat[f].item<double>(), e = lr_feat[f].item<double>(), ks = k_sq[f].item<double>();
    const double precond = a - e * ks;
    for (int64_t h = 0; h < hidden; ++h) {
      const double w1 = seed_w1[h][f].item<double>() * precond - e * grad_w1[h][f].item<double>();
      const double w2 = seed_w2[f][h].item<double>() * precond - e * grad_w2[f][h].item<double>();
      worst = std::max(worst, std::abs(ours[1][h][f].item<double>() - w1));
      worst = std::max(worst, std::abs(ours[0][f][h].item<double>() - w2));
    }
  }
  CHECK(worst < 1e-14);
}

TEST_CASE("self-modifying memory: every write is dgd toward its self-generated target, by hand", "[model]") {
  // (clip, model.hope.self_lr_scale): the projection memories write with s·η, the memory with η.
  for (const auto& [clip, scale] : std::vector<std::pair<double, double>>{{0.0, 1.0}, {0.02, 1.0}, {0.02, 0.25}}) {
    auto sm = make_selfmod(clip, scale);
    auto x = input(2, 4);
    torch::NoGradGuard no_grad;
    SelfModState state = sm->initial_state(2);
    int clipped = 0;
    for (int64_t t = 0; t < x.size(1); ++t) {
      const SelfModState before = state.clone();
      SelfModRecord rec;
      const torch::Tensor y = sm->step(x.select(1, t), state, &rec);
      for (int64_t b = 0; b < 2; ++b) {
        auto w = [&](const SelfModState& s, int m, int i) { return s.weights[m][i][b][0]; };
        auto M = [&](int m, const torch::Tensor& z) {
          return mlp_by_hand(z, w(before, m, 0), w(before, m, 1), sm->ln_weight[m][0], sm->ln_bias[m][0]);
        };
        const torch::Tensor xt = x[b][t];
        const torch::Tensor kr = M(0, xt), k = kr / kr.norm();
        const torch::Tensor v = M(1, xt);
        const torch::Tensor eta = 30.0 * torch::sigmoid(M(2, xt) + sm->b_lr);
        const torch::Tensor alpha = torch::sigmoid(M(3, xt) + sm->b_retain);
        CHECK(max_abs_diff(rec.k[b], k) < 1e-12);
        CHECK(max_abs_diff(rec.v[b], v) < 1e-12);
        CHECK(max_abs_diff(rec.lr[b], eta) < 1e-12);
        CHECK(max_abs_diff(rec.retain[b], alpha) < 1e-12);
        // The preconditioner the probes report as effective retention (SPEC §8).
        CHECK(max_abs_diff(state.last_precond[b], alpha - eta * k * k) < 1e-12);
        for (int m = 0; m < kSelfModCount; ++m) {
          INFO("clip " << clip << " scale " << scale << " t " << t << " memory " << to_string(static_cast<SelfModMemory>(m)));
          const torch::Tensor target = m == 4 ? v : M(m, v);  // v̂_□ = M_□(v_t); the main memory stores v_t
          CHECK(max_abs_diff(rec.target[m][b], target) < 1e-12);
          torch::Tensor g1, g2;
          {
            torch::AutoGradMode grad_on(true);
            torch::Tensor a1 = w(before, m, 0).clone().requires_grad_(true), a2 = w(before, m, 1).clone().requires_grad_(true);
            torch::Tensor out = mlp_by_hand(k, a1, a2, sm->ln_weight[m][0], sm->ln_bias[m][0]);
            torch::Tensor loss = 0.5 * (out - target).pow(2).sum() / kD;
            CHECK(std::abs(rec.target_error[m][b].item<double>() - loss.item<double>()) < 1e-12);
            auto g = torch::autograd::grad({loss}, {a1, a2});
            g1 = g[0];
            g2 = g[1];
          }
          const double norm = std::sqrt(g1.pow(2).sum().item<double>() + g2.pow(2).sum().item<double>());
          const double kappa = clip > 0 ? std::min(1.0, clip / norm) : 1.0;
          clipped += kappa < 1.0;
          // W1 [d,4d] rows and W2 [4d,d] columns scaled by p = α − η_m k², then − η_m κ g.
          const torch::Tensor eta_m = m == 4 ? eta : scale * eta;
          const torch::Tensor p = alpha - eta_m * k * k;
          const torch::Tensor w1 = w(before, m, 0) * p.unsqueeze(1) - eta_m.unsqueeze(1) * kappa * g1;
          const torch::Tensor w2 = w(before, m, 1) * p.unsqueeze(0) - eta_m.unsqueeze(0) * kappa * g2;
          CHECK(max_abs_diff(w(state, m, 0), w1) < 1e-10);
          CHECK(max_abs_diff(w(state, m, 1), w2) < 1e-10);
        }
        // Read after the write, with the static query.
        const torch::Tensor qr = torch::matmul(sm->w_q, xt), q = qr / qr.norm();
        CHECK(max_abs_diff(y[b], mlp_by_hand(q, w(state, 4, 0), w(state, 4, 1), sm->ln_weight[4][0], sm->ln_bias[4][0])) <
              1e-10);
      }
    }
    if (clip > 0) CHECK(clipped > 0);
  }
}

TEST_CASE("self-modifying memory: training writes exactly what inference writes", "[model]") {
  // M_k writes at its own key k = normalize(M_k(x)): with grad mode on, the inner gradient must
  // still be ∂ℓ/∂W_k at the memory read only, not also through k (it was, before the fix), or a
  // model would learn in training by a different rule than it runs by.
  auto sm = make_selfmod(0.05);
  auto x = input(2, 6);
  auto run = [&](bool grad) {
    torch::AutoGradMode mode(grad);
    SelfModState s = sm->initial_state(2);
    const torch::Tensor y = sm->forward(x, s).detach();
    return std::make_pair(y, s.detached());
  };
  const auto train = run(true), infer = run(false);
  CHECK(max_abs_diff(train.first, infer.first) < 1e-12);
  for (int m = 0; m < kSelfModCount; ++m)
    for (size_t i = 0; i < 2; ++i) {
      INFO(to_string(static_cast<SelfModMemory>(m)) << " W" << i + 1);
      CHECK(max_abs_diff(train.second.weights[m][i], infer.second.weights[m][i]) < 1e-12);
    }
}

TEST_CASE("self-modifying memory: the self-generated targets differ per memory", "[model]") {
  auto sm = make_selfmod();
  auto x = input(1, 1);
  torch::NoGradGuard no_grad;
  SelfModState state = sm->initial_state(1);
  SelfModRecord rec;
  sm->step(x.select(1, 0), state, &rec);
  for (int a = 0; a < kSelfModCount; ++a)
    for (int b = a + 1; b < kSelfModCount; ++b) CHECK(max_abs_diff(rec.target[a], rec.target[b]) > 1e-6);
}

TEST_CASE("self-modifying memory: every memory updates in eval mode and without gradients", "[model]") {
  auto sm = make_selfmod();
  sm->eval();
  auto x = input(1, 3);
  torch::NoGradGuard no_grad;
  SelfModState state = sm->initial_state(1);
  sm->forward(x, state);
  CHECK(state.tokens == 3);
  for (int m = 0; m < kSelfModCount; ++m) {
    INFO(to_string(static_cast<SelfModMemory>(m)));
    CHECK(max_abs_diff(state.weights[m][0][0], sm->w1_0[m]) > 1e-6);
    CHECK(max_abs_diff(state.weights[m][1][0], sm->w2_0[m]) > 1e-6);
  }
}

TEST_CASE("self-modifying memory: every memory's initial state receives an outer gradient", "[model]") {
  auto sm = make_selfmod();
  auto x = input(2, 5);
  SelfModState state = sm->initial_state(2);
  const torch::Tensor y = sm->forward(x, state);
  (y.pow(2).mean() + 0.1 * state.aux.mean()).backward();
  for (const auto& p : sm->named_parameters()) {
    INFO(p.key());
    REQUIRE(p.value().grad().defined());
    CHECK(p.value().grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("self-modifying memory: the auxiliary loss alone trains M_k and M_v (seed 004 change 1)", "[model]") {
  auto sm = make_selfmod();
  auto x = input(1, 1);
  SelfModState state = sm->initial_state(1);
  sm->step(x.select(1, 0), state);
  // The first token's aux reads the main memory before any write: it reaches M_k through k_t
  // and M_v through v_t, and nothing else (M_η and M_α act only through the writes).
  state.aux.sum().backward();
  for (int m : {0, 1})
    for (const auto* p : {&sm->w1_0[m], &sm->w2_0[m]}) {
      INFO(to_string(static_cast<SelfModMemory>(m)));
      REQUIRE(p->grad().defined());
      CHECK(p->grad().abs().sum().item<double>() > 0);
    }
  for (int m : {2, 3}) CHECK((!sm->w1_0[m].grad().defined() || sm->w1_0[m].grad().abs().sum().item<double>() == 0));
  CHECK(state.aux.item<double>() > 0);
}

TEST_CASE("self-modifying memory: model.hope.conv gives q, k and v the three tokens before, by hand", "[model]") {
  // SPEC §2's depthwise causal conv of width 4, after W_q, M_k and M_v: at token t each channel is
  // Σ_j taps[c, j] · pre[t − 3 + j, c], with zeros before the stream start.
  torch::manual_seed(9);
  SelfModOptions o;
  o.d_model = kD;
  o.max_lr = 30.0;
  o.conv = true;
  SelfModifyingMemory m(o);
  m->to(memscope::test::test_device(), torch::kFloat64);
  const torch::Tensor x = input(2, 5);
  SelfModState state = m->initial_state(2);
  std::vector<torch::Tensor> pre;  // [B,3d] per token: q|k|v before the conv, at the memories' states
  for (int64_t t = 0; t < 5; ++t) {
    const torch::Tensor x_t = x.select(1, t);
    pre.push_back(torch::cat({torch::matmul(x_t, m->w_q.t()), m->read(SelfModMemory::Key, state, x_t),
                              m->read(SelfModMemory::Value, state, x_t)},
                             -1));
    SelfModRecord r;
    m->step(x_t, state, &r);
    torch::Tensor mixed = torch::zeros_like(pre.back());
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t i = t - 3 + j;
      if (i >= 0) mixed = mixed + m->conv_weight.select(1, j) * pre[static_cast<size_t>(i)];
    }
    const auto parts = mixed.chunk(3, -1);
    CAPTURE(t);
    CHECK(max_abs_diff(r.q, parts[0] / parts[0].norm(2, -1, true)) < 1e-12);
    CHECK(max_abs_diff(r.k, parts[1] / parts[1].norm(2, -1, true)) < 1e-12);
    CHECK(max_abs_diff(r.v, parts[2]) < 1e-12);
  }
  CHECK(m->conv_weight.requires_grad());
  CHECK_FALSE(make_selfmod()->conv_weight.defined());  // off by default: SPEC §7's HOPE has none
}

namespace {

SelfModifyingMemory make_selfmod_with(double clip, bool conv, double self_lr_scale = 1.0, bool shared_gates = false) {
  torch::manual_seed(9);
  SelfModOptions o;
  o.d_model = kD;
  o.max_lr = 30.0;
  o.inner_clip = clip;
  o.conv = conv;
  o.self_lr_scale = self_lr_scale;
  o.shared_gates = shared_gates;
  SelfModifyingMemory m(o);
  m->to(memscope::test::test_device(), torch::kFloat64);
  return m;
}

// y, the final state and every parameter's outer gradient of one run.
struct SelfModRun {
  torch::Tensor y;
  SelfModState state;
  std::vector<torch::Tensor> grads;
};

SelfModRun run_selfmod(SelfModifyingMemory& sm, const torch::Tensor& x, int64_t chunk, bool chunkwise,
                       const std::vector<int64_t>& calls = {}) {
  sm->zero_grad();
  SelfModState s = sm->initial_state(x.size(0));
  std::vector<torch::Tensor> ys;
  if (chunkwise) {
    int64_t t = 0;
    for (int64_t len : calls) {  // forward() in pieces, as a caller that stops inside a chunk would
      ys.push_back(sm->forward(x.narrow(1, t, len), s, chunk));
      t += len;
    }
    if (t < x.size(1)) ys.push_back(sm->forward(x.narrow(1, t, x.size(1) - t), s, chunk));
  } else {
    for (int64_t t = 0; t < x.size(1); ++t) ys.push_back(sm->step(x.select(1, t), s, nullptr, chunk).unsqueeze(1));
  }
  SelfModRun r;
  r.y = torch::cat(ys, 1);
  (r.y.pow(2).mean() + 0.1 * s.aux.mean() + s.weights[4][0].pow(2).mean()).backward();
  for (const auto& p : sm->parameters()) r.grads.push_back(p.grad().clone());
  r.state = s.detached();
  r.y = r.y.detach();
  return r;
}

}  // namespace

TEST_CASE("self-modifying memory: the chunkwise form equals the sequential step at every chunk size", "[model]") {
  // SPEC §9: b = 1 is the exact rule; b > 1 equals the step frozen at chunk starts. Outputs, every
  // memory's final weights, aux, the probes' last write, and the outer gradients of every parameter.
  const torch::Tensor x = input(2, 7);
  for (bool conv : {false, true})
    for (double clip : {0.0, 0.05})
      for (int64_t chunk : {1, 3, 4, 8}) {
        const double scale = conv ? 0.25 : 1.0;  // model.hope.self_lr_scale
        const bool shared = clip > 0;            // model.hope.shared_gates
        INFO("conv " << conv << " clip " << clip << " chunk " << chunk << " self_lr_scale " << scale << " shared gates "
                     << shared);
        auto sm = make_selfmod_with(clip, conv, scale, shared);
        const SelfModRun seq = run_selfmod(sm, x, chunk, false), par = run_selfmod(sm, x, chunk, true);
        CHECK(max_abs_diff(seq.y, par.y) < 1e-10);
        CHECK(max_abs_diff(seq.state.aux, par.state.aux) < 1e-10);
        CHECK(max_abs_diff(seq.state.last_error, par.state.last_error) < 1e-10);
        CHECK(max_abs_diff(seq.state.last_precond, par.state.last_precond) < 1e-10);
        for (int m = 0; m < kSelfModCount; ++m)
          for (size_t i = 0; i < 2; ++i) CHECK(max_abs_diff(seq.state.weights[m][i], par.state.weights[m][i]) < 1e-10);
        REQUIRE(seq.grads.size() == par.grads.size());
        for (size_t i = 0; i < seq.grads.size(); ++i)
          CHECK(max_abs_diff(seq.grads[i], par.grads[i]) < 1e-9 * (1 + seq.grads[i].abs().max().item<double>()));
      }
}

TEST_CASE("self-modifying memory: chunks reach back to the chunk start, across calls", "[model]") {
  const torch::Tensor x = input(2, 7);
  auto sm = make_selfmod_with(0.0, false);
  // b > 1 is a different model from b = 1 (the writes inside a chunk read older memories) ...
  const SelfModRun one = run_selfmod(sm, x, 1, true), four = run_selfmod(sm, x, 4, true);
  CHECK(max_abs_diff(one.y.narrow(1, 0, 1), four.y.narrow(1, 0, 1)) < 1e-12);  // the first token reads the same
  CHECK(max_abs_diff(one.y, four.y) > 1e-4);
  // ... and a call that ends inside a chunk leaves its start for the next call, in both forms.
  const SelfModRun pieces = run_selfmod(sm, x, 4, true, {2, 3, 1});
  CHECK(max_abs_diff(pieces.y, four.y) < 1e-10);
  CHECK(max_abs_diff(pieces.state.weights[4][0], four.state.weights[4][0]) < 1e-10);

  // By hand: the key of token 2 (inside the first chunk of 4) is M_k at the stream start.
  torch::NoGradGuard no_grad;
  SelfModState s = sm->initial_state(2);
  const SelfModState start = s.clone();
  SelfModRecord rec;
  for (int64_t t = 0; t < 3; ++t) sm->step(x.select(1, t), s, &rec, 4);
  const torch::Tensor k = sm->read(SelfModMemory::Key, start, x.select(1, 2));
  CHECK(max_abs_diff(rec.k, k / k.norm(2, -1, true)) < 1e-12);
  CHECK(s.anchor_chunk == 4);
}

TEST_CASE(
    "self-modifying memory: one token a call equals the step, with the forms mixed and the state cloned",
    "[model]") {
  // The model's step (the debugger's) calls forward() one token at a time: every token but a chunk's
  // first continues a chunk, reading its start from the anchor while writing onto the current
  // memories. Against the step: the outputs, the memories and the outer gradients.
  const torch::Tensor x = input(2, 9);
  for (int64_t chunk : {1, 3, 4}) {
    INFO("chunk " << chunk);
    auto sm = make_selfmod_with(0.05, true, 0.25, true);
    const SelfModRun step = run_selfmod(sm, x, chunk, false);
    const SelfModRun one_by_one = run_selfmod(sm, x, chunk, true, std::vector<int64_t>(9, 1));
    CHECK(max_abs_diff(step.y, one_by_one.y) < 1e-10);
    CHECK(max_abs_diff(step.state.aux, one_by_one.state.aux) < 1e-10);
    for (int m = 0; m < kSelfModCount; ++m)
      for (size_t i = 0; i < 2; ++i)
        CHECK(max_abs_diff(step.state.weights[m][i], one_by_one.state.weights[m][i]) < 1e-10);
    for (size_t i = 0; i < step.grads.size(); ++i)
      CHECK(max_abs_diff(step.grads[i], one_by_one.grads[i]) <
            1e-9 * (1 + step.grads[i].abs().max().item<double>()));

    // The two forms alternating token by token (each reads the anchor the other left), on a state
    // cloned before every token, as the engine keeps one per token to rewind to.
    torch::NoGradGuard no_grad;
    SelfModState s = sm->initial_state(2);
    std::vector<torch::Tensor> ys;
    for (int64_t t = 0; t < x.size(1); ++t) {
      SelfModState next = s.clone();
      if (t > 0 && t % 2 == 0) {
        // What the chunkwise form left is still one stack after the clone, so the next call need
        // not stack the memories again; and the clone is its own copy.
        CHECK(slices_of(next.stacked, next.weights));
        CHECK_FALSE(next.stacked[0].is_alias_of(s.stacked[0]));
      }
      ys.push_back(t % 2 == 0 ? sm->step(x.select(1, t), next, nullptr, chunk).unsqueeze(1)
                              : sm->forward(x.narrow(1, t, 1), next, chunk));
      s = next;
    }
    CHECK(max_abs_diff(step.y, torch::cat(ys, 1)) < 1e-10);
    for (int m = 0; m < kSelfModCount; ++m)
      for (size_t i = 0; i < 2; ++i) CHECK(max_abs_diff(step.state.weights[m][i], s.weights[m][i]) < 1e-10);
  }
}

namespace {

// Every tensor a state holds, for the check that nothing is written in place.
std::vector<torch::Tensor> tensors_of(const SelfModState& s) {
  std::vector<torch::Tensor> out{s.aux, s.conv};
  for (const auto* group : {&s.weights, &s.anchor})
    for (const auto& w : *group) out.insert(out.end(), w.begin(), w.end());
  for (const auto* stack : {&s.stacked, &s.anchor_stacked})
    out.insert(out.end(), stack->begin(), stack->end());
  return out;
}

// One token a call under no_grad, at chunk[t] for token t; with `mixed`, the even tokens through
// step() (whose anchor the next forward() reads). Every state on the way is kept beside a clone,
// as the engine keeps them to rewind to.
struct TokenRun {
  torch::Tensor y;
  SelfModState state;
  std::vector<SelfModState> kept, copies;
};

TokenRun run_tokens(const SelfModifyingMemory& sm, const torch::Tensor& x, const std::vector<int64_t>& chunk,
                    bool mixed) {
  torch::NoGradGuard no_grad;
  TokenRun r;
  r.state = sm->initial_state(x.size(0));
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < x.size(1); ++t) {
    r.kept.push_back(r.state);
    r.copies.push_back(r.state.clone());
    const int64_t b = chunk[static_cast<size_t>(t)];
    ys.push_back(mixed && t % 2 == 0 ? sm->step(x.select(1, t), r.state, nullptr, b).unsqueeze(1)
                                     : sm->forward(x.narrow(1, t, 1), r.state, b));
  }
  r.y = torch::cat(ys, 1).to(torch::kFloat64);
  return r;
}

}  // namespace

TEST_CASE(
    "self-modifying memory: one token a call without gradients (the fused step) equals the ATen form and "
    "float64",
    "[model]") {
  // The model's step calls forward() one token at a time under no_grad; on the CPU in float32 that
  // token is fused_selfmod_step.cpp's loops. Against the ATen chunk form (ScopedAtenForms) in
  // float32 and the per-token step in float64: outputs, memories, aux, the conv's carry and the
  // probes' last write. At b = 1; inside chunks of 3; with the chunk size changed from 3 to 4 in
  // the middle of a chunk; and with step() and forward() alternating, each reading the other's anchor.
  memscope::test::ScopedCpuDevice cpu;  // the fused kernels are CPU code
  if (!memscope::test::cpu_kernels_testable()) return;
  const torch::Tensor x64 = input(2, 8);
  struct Setting {
    bool conv, shared;
    double clip, scale;
  };
  const std::vector<std::vector<int64_t>> schedules{
      std::vector<int64_t>(8, 1),
      std::vector<int64_t>(8, 3),
      {3, 3, 3, 3, 3, 4, 4, 4}};  // the last: at token 5, 5 % 4 ≠ 0
  for (const Setting& set : {Setting{false, false, 0.0, 1.0}, Setting{true, true, 0.05, 0.25},
                             Setting{false, true, 0.05, 1.0}, Setting{true, false, 0.0, 0.25}})
    for (const auto& schedule : schedules)
      for (bool mixed : {false, true}) {
        INFO("conv " << set.conv << " shared gates " << set.shared << " clip " << set.clip << " chunks "
                     << schedule[0] << "," << schedule[7] << " mixed " << mixed);
        auto sm = make_selfmod_with(set.clip, set.conv, set.scale, set.shared);
        if (set.conv) {
          torch::NoGradGuard no_grad;
          sm->conv_weight.mul_(1.5);  // every tap away from its initial 0 or 1
        }
        SelfModState reference = sm->initial_state(2);
        std::vector<torch::Tensor> want;
        {
          torch::NoGradGuard no_grad;
          for (int64_t t = 0; t < 8; ++t)
            want.push_back(sm->step(x64.select(1, t), reference, nullptr, schedule[static_cast<size_t>(t)]));
        }
        sm->to(torch::kFloat32);
        const torch::Tensor x = x64.to(torch::kFloat32);
        const TokenRun fused = run_tokens(sm, x, schedule, mixed);
        TokenRun aten;
        {
          const ScopedAtenForms aten_forms;
          aten = run_tokens(sm, x, schedule, mixed);
        }
        CHECK(max_abs_diff(fused.y, aten.y) > 0);  // the fused step ran: its rounding differs somewhere
        // float32 against float64 through 8 writes at η up to 0.3, relative to each tensor's size.
        // Unclipped with per-feature gates the recurrence is the least well conditioned: there the
        // ATen form's own float32 outputs are 2e-5 of their size from float64, and the fused step's
        // within twice that.
        auto near = [](const torch::Tensor& got, const torch::Tensor& want) {
          return max_abs_diff(got.to(torch::kFloat64), want) < 1e-4 * (1 + want.abs().max().item<double>());
        };
        CHECK(near(fused.y, aten.y));
        CHECK(near(fused.y, torch::stack(want, 1)));
        const double aten_error = max_abs_diff(aten.y, torch::stack(want, 1));
        CHECK(max_abs_diff(fused.y, torch::stack(want, 1)) < 3 * aten_error + 1e-6);
        const SelfModState& got = fused.state;
        CHECK(near(got.aux, reference.aux));
        for (const auto& [value, expected] : {std::pair{&got.last_error, &reference.last_error},
                                              {&got.last_retain, &reference.last_retain},
                                              {&got.last_lr, &reference.last_lr},
                                              {&got.last_precond, &reference.last_precond}})
          CHECK(near(*value, *expected));
        if (set.conv) CHECK(near(got.conv, reference.conv));
        for (int m = 0; m < kSelfModCount; ++m)
          for (size_t i = 0; i < 2; ++i) {
            CHECK(near(got.weights[m][i], reference.weights[m][i]));
            // The writes are not vanishing: every memory moved.
            CHECK(max_abs_diff(got.weights[m][i], fused.copies.front().weights[m][i]) > 1e-3);
          }
        CHECK(got.anchor_chunk == reference.anchor_chunk);
        CHECK(got.tokens == 8);
        // Nothing was written in place: every state kept on the way still equals its clone.
        for (size_t t = 0; t < fused.kept.size(); ++t) {
          const auto kept = tensors_of(fused.kept[t]), copy = tensors_of(fused.copies[t]);
          REQUIRE(kept.size() == copy.size());
          for (size_t i = 0; i < kept.size(); ++i)
            if (kept[i].defined()) CHECK(torch::equal(kept[i], copy[i]));
        }
        if (set.clip > 0) {
          // The clip binds: the same run unclipped writes differently.
          sm->set_live(30.0, 0.0);
          CHECK(max_abs_diff(run_tokens(sm, x, schedule, mixed).y, fused.y) > 1e-4);
        }
      }
}

TEST_CASE("self-modifying memory: the chunkwise form's float32 outer gradients match float64", "[model]") {
  // The chunkwise form differentiates plain tensor ops (no double backward); float32 must track
  // the float64 reference the way any float32 backward does.
  const torch::Tensor x = input(2, 8);
  auto sm = make_selfmod_with(0.05, true);
  const SelfModRun reference = run_selfmod(sm, x, 4, true);
  sm->to(torch::kFloat32);
  const SelfModRun single = run_selfmod(sm, x.to(torch::kFloat32), 4, true);
  for (size_t i = 0; i < reference.grads.size(); ++i) {
    INFO("parameter " << i);
    const double scale = reference.grads[i].abs().max().item<double>();
    CHECK(max_abs_diff(single.grads[i].to(torch::kFloat64), reference.grads[i]) < 1e-3 * (1 + scale));
  }
}

TEST_CASE("self-modifying memory: shared gates give every feature the sigmoid of the logits' mean", "[model]") {
  // model.hope.shared_gates: η_t = max_lr·σ(mean_i(M_η(x_t) + b_η)_i), the same for every feature; α_t alike.
  const torch::Tensor x = input(2, 3);
  torch::NoGradGuard no_grad;
  for (bool shared : {false, true}) {
    auto sm = make_selfmod_with(0.0, false, 1.0, shared);
    SelfModState s = sm->initial_state(2);
    SelfModRecord rec;
    sm->step(x.select(1, 0), s, &rec);
    const SelfModState start = sm->initial_state(2);
    const torch::Tensor lr_logits = sm->read(SelfModMemory::Lr, start, x.select(1, 0)) + sm->b_lr;
    const torch::Tensor retain_logits = sm->read(SelfModMemory::Retain, start, x.select(1, 0)) + sm->b_retain;
    const torch::Tensor want_lr =
        30.0 * (shared ? torch::sigmoid(lr_logits.mean(-1, true)).expand_as(lr_logits) : torch::sigmoid(lr_logits));
    const torch::Tensor want_retain =
        shared ? torch::sigmoid(retain_logits.mean(-1, true)).expand_as(retain_logits) : torch::sigmoid(retain_logits);
    INFO("shared " << shared);
    CHECK(max_abs_diff(rec.lr, want_lr) < 1e-12);
    CHECK(max_abs_diff(rec.retain, want_retain) < 1e-12);
    // Per feature, the gates differ across features (the logits do); shared, they do not.
    CHECK((rec.lr.std(-1).max().item<double>() < 1e-12) == shared);
  }
}

TEST_CASE("self-modifying memory: under bf16 autocast the memories run in float32, both forms", "[model]") {
  // train.bf16_autocast: every product in HOPE's memory reads or writes a memory, so autocast is
  // off inside (self_modifying_chunkwise.cpp); the same bits as the float32 run, autocast on again
  // after. In bf16 the output was 2.7–3.4× as far off as rounding the input to bf16 makes it.
  for (bool conv : {false, true}) {
    auto sm = make_selfmod_with(1.0, conv);
    sm->to(torch::kFloat32);
    const torch::Tensor x = input(2, 21).to(torch::kFloat32);
    SelfModState plain = sm->initial_state(2), autocast = sm->initial_state(2);
    // A chunk and a half chunkwise, then a half chunk token by token, then the rest chunkwise.
    auto run = [&](SelfModState& s) {
      std::vector<torch::Tensor> ys{sm->forward(x.narrow(1, 0, 12), s, 8)};
      for (int64_t t = 12; t < 16; ++t) ys.push_back(sm->step(x.select(1, t), s, nullptr, 8).unsqueeze(1));
      ys.push_back(sm->forward(x.narrow(1, 16, 5), s, 8));
      return torch::cat(ys, 1);
    };
    const torch::Tensor want = run(plain);
    const torch::Tensor got = memscope::test::under_bf16_autocast([&] { return run(autocast); });
    INFO("conv " << conv);
    CHECK(got.scalar_type() == torch::kFloat32);
    CHECK(torch::equal(got, want));
    for (int m = 0; m < kSelfModCount; ++m)
      for (size_t i = 0; i < 2; ++i) CHECK(torch::equal(autocast.weights[m][i], plain.weights[m][i]));
  }
}
