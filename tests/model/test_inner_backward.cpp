// The backward through the inner loop (issue 18, item 1) against an independent computation in
// float64. inner_backward reads autograd's gradient at the states the step made; the test instead
// adds a zero tensor E_t to each state after step t (so every later use sees M_t + E_t) and asks
// autograd for ∂L/∂E_t. That is ∂L/∂M_t when no use of M_t happens inside step t itself, so the
// memory reads before its write here (memory.read = before-write): with after-write the token's own
// read is a use the injection cannot reach, the same autograd node either way. For Muon, the part
// through token t's Newton–Schulz call is the NS vector-Jacobian product at S_t with
// ∂L/∂O_t = −η_t ∂L/∂M_t (O_t enters only M_t = α M − η O_t), and ∂L/∂S_t is that plus what S_t
// carries on (the gradient at an E added to S after step t).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "support/test_device.h"

#include "model/config/preset.h"
#include "model/memory/newton_schulz.h"
#include "model/nn/language_model.h"
#include "model/probe/inner_backward.h"

namespace {

using namespace memscope::model;

LanguageModel tiny(const std::string& block, const std::string& memory, std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"model.block=" + block, "model.d_model=16", "model.layers=2", "model.memory_heads=2",
                           "model.attention_heads=2", "model.window=3", "model.persistent=2", "memory.lr.max=2"});
  const Preset p = load_preset(memory, sets);
  LmConfig config = p.model;
  config.vocab = 11;
  torch::manual_seed(7);
  LanguageModel lm(config, p.memory);
  lm->to(memscope::test::test_device(), torch::kFloat64);
  return lm;
}

struct Reference {
  // [t][layer][weight]: the gradients at M_t and at the E added to S_t, S_t itself and η_t [B,H].
  std::vector<std::vector<std::vector<torch::Tensor>>> grad_m, carry_s, s;
  std::vector<std::vector<torch::Tensor>> eta;
  // [t][hope layer][memory]: ‖∂L/∂W_t‖ over W1 and W2.
  std::vector<std::vector<std::vector<double>>> selfmod;
  double loss = 0;
};

Reference by_injection(const LanguageModel& lm, const torch::Tensor& tokens, const torch::Tensor& targets, int64_t chunk,
                       double total_targets) {
  LmState state = lm->initial_state(1);
  std::vector<torch::Tensor> e_m, e_s, e_w;  // zeros the loss is differentiated by
  Reference r;
  torch::Tensor ce = torch::zeros({}, torch::kFloat64).to(memscope::test::test_device());
  const int64_t T = tokens.size(0);
  for (int64_t t = 0; t < T; ++t) {
    const LmStepOutput out = lm->step(tokens.narrow(0, t, 1), state, chunk);
    if (targets[t].item<int64_t>() >= 0) ce = ce - torch::log_softmax(out.logits[0], 0)[targets[t].item<int64_t>()];
    r.s.emplace_back();
    r.eta.emplace_back();
    for (int64_t l = 0; l < lm->layers(); ++l) {
      MemoryState& m = state.blocks[static_cast<size_t>(l)].memory;
      r.s.back().emplace_back();
      if (m.memory.empty()) continue;
      r.eta.back().push_back(out.records[static_cast<size_t>(l)]->lr.detach());
      for (size_t w = 0; w < m.memory.size(); ++w) {
        e_m.push_back(torch::zeros_like(m.memory[w]).requires_grad_(true));
        m.memory[w] = m.memory[w] + e_m.back();
        r.s.back().back().push_back(m.momentum[w].detach().clone());
        e_s.push_back(torch::zeros_like(m.momentum[w]).requires_grad_(true));
        m.momentum[w] = m.momentum[w] + e_s.back();
      }
    }
    for (auto& block : state.blocks)
      for (auto& memory : block.selfmod.weights)
        for (auto& w : memory) {
          e_w.push_back(torch::zeros_like(w).requires_grad_(true));
          w = w + e_w.back();
        }
  }
  const torch::Tensor loss = ce / total_targets;
  r.loss = loss.item<double>();
  std::vector<torch::Tensor> all = e_m;
  all.insert(all.end(), e_s.begin(), e_s.end());
  all.insert(all.end(), e_w.begin(), e_w.end());
  const auto g = torch::autograd::grad({loss}, all, {}, false, false, /*allow_unused=*/true);
  auto grad_or_zero = [&](size_t i) { return g[i].defined() ? g[i] : torch::zeros_like(all[i]); };
  size_t i = 0, j = e_m.size(), k = e_m.size() + e_s.size();
  for (int64_t t = 0; t < T; ++t) {
    r.grad_m.emplace_back();
    r.carry_s.emplace_back();
    r.selfmod.emplace_back();
    for (int64_t l = 0; l < lm->layers(); ++l) {
      r.grad_m.back().emplace_back();
      r.carry_s.back().emplace_back();
      for (size_t w = 0; w < r.s[static_cast<size_t>(t)][static_cast<size_t>(l)].size(); ++w) {
        r.grad_m.back().back().push_back(grad_or_zero(i++));
        r.carry_s.back().back().push_back(grad_or_zero(j++));
      }
      if (!lm->block(l)->selfmod) continue;
      r.selfmod.back().emplace_back();
      for (int memory = 0; memory < kSelfModCount; ++memory) {
        const double sq = grad_or_zero(k).pow(2).sum().item<double>() + grad_or_zero(k + 1).pow(2).sum().item<double>();
        k += 2;
        r.selfmod.back().back().push_back(std::sqrt(sq));
      }
    }
  }
  return r;
}

double norm_of_head(const torch::Tensor& g, int64_t h) { return g[0][h].norm().item<double>(); }

// The norms are stored as float (frames keep float32): 1e-6 relative is their rounding, not slack.
bool close(double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(1e-6, std::abs(b)); }

}  // namespace

TEST_CASE("inner backward: ‖∂L/∂M_t‖, ‖∂L/∂S_t‖ and the part through each NS call equal float64 autograd by injection",
          "[model]") {
  // Atlas (Muon, Omega c = 4) on linear and MLP memory, and Titans' gd-momentum (no NS), chunk 1 and 3.
  struct Case {
    std::string memory;
    std::vector<std::string> sets;
    int64_t chunk;
  };
  for (const Case& c : {Case{"atlas", {}, 1}, Case{"atlas", {}, 3}, Case{"atlas", {"memory.structure=mlp"}, 3},
                        Case{"titans-lmm", {}, 2}}) {
    CAPTURE(c.memory, c.sets, c.chunk);
    std::vector<std::string> sets = c.sets;
    sets.push_back("memory.read=before-write");
    LanguageModel lm = tiny("mag", c.memory, sets);
    torch::manual_seed(11);
    const torch::Tensor tokens = torch::randint(0, 11, {9}, torch::kLong).to(memscope::test::test_device());
    const torch::Tensor targets = torch::tensor({3, -1, 5, 7, -1, 2, 9, 1, 4}, torch::kLong).to(memscope::test::test_device());
    InnerBackwardOptions o;
    o.chunk = c.chunk;
    o.targets = 12;  // as if the batch held more rows
    const InnerBackward got = inner_backward(*lm, tokens, targets, o);
    const Reference want = by_injection(lm, tokens, targets, c.chunk, 12);
    REQUIRE(close(got.loss, want.loss));
    REQUIRE(got.layers == 2);
    REQUIRE(got.heads == 2);
    const bool muon = lm->rule().optimiser == Optimiser::Muon;
    double largest = 0;
    for (int64_t t = 0; t < 9; ++t)
      for (int64_t l = 0; l < 2; ++l)
        for (int64_t w = 0; w < got.weights; ++w) {
          const auto& gm = want.grad_m[t][l][w];
          // NS's vector-Jacobian product at S_t with ∂L/∂O_t = −η_t ∂L/∂M_t.
          torch::Tensor through_ns = torch::zeros_like(gm);
          if (muon) {
            const torch::Tensor s = want.s[t][l][w].clone().requires_grad_(true);
            const torch::Tensor o_t = newton_schulz(s, lm->rule().ns);
            const torch::Tensor cotangent = -want.eta[t][l].unsqueeze(-1).unsqueeze(-1) * gm;
            through_ns = torch::autograd::grad({o_t}, {s}, {cotangent})[0];
          }
          for (int64_t h = 0; h < 2; ++h) {
            CAPTURE(t, l, w, h);
            const size_t cell = static_cast<size_t>(((l * 2 + h) * got.weights + w) * 3);
            const auto& row = got.memory[static_cast<size_t>(t)];
            CAPTURE(row[cell], norm_of_head(gm, h), row[cell + 1], row[cell + 2]);
            CHECK(close(row[cell], norm_of_head(gm, h)));
            largest = std::max(largest, norm_of_head(gm, h));
            if (muon) {
              CHECK(close(row[cell + 2], norm_of_head(through_ns, h)));
              CHECK(close(row[cell + 1], norm_of_head(through_ns + want.carry_s[t][l][w], h)));
            } else {
              CHECK(std::isnan(row[cell + 2]));
            }
          }
        }
    CHECK(largest > 1e-4);  // the comparison is not between zeros
  }
}

TEST_CASE("inner backward: HOPE's self-modifying memories' ‖∂L/∂W_t‖ equal float64 autograd by injection", "[model]") {
  // M_k, M_v, M_η and M_α are read at the start of each step, before any write, so injection
  // reaches every use; the main memory M is read after its write (y_t = M_t(q_t)) and is the
  // same code path. The model's step leaves the memories as slices of one stack, which
  // inner_backward captures whole; the injection replaces each memory, so the reference's next step
  // stacks them afresh. At b = 3 the writes inside a chunk read its start through the anchor.
  LanguageModel lm = tiny("hope", "hope", {"model.cms.periods=1,2,5"});
  torch::manual_seed(13);
  const torch::Tensor tokens = torch::randint(0, 11, {7}, torch::kLong).to(memscope::test::test_device());
  const torch::Tensor targets = torch::tensor({-1, 4, 2, -1, 8, 8, 0}, torch::kLong).to(memscope::test::test_device());
  for (const int64_t chunk : {1, 3}) {
    INFO("chunk " << chunk);
    InnerBackwardOptions o;
    o.targets = 5;
    o.chunk = chunk;
    const InnerBackward got = inner_backward(*lm, tokens, targets, o);
    const Reference want = by_injection(lm, tokens, targets, chunk, 5);
    REQUIRE(got.hope_layers == 2);
    REQUIRE(got.layers == 0);
    for (size_t t = 0; t < 7; ++t)
      for (size_t l = 0; l < 2; ++l)
        for (size_t m = 0; m < kSelfModCount; ++m) {
          CAPTURE(t, l, m);
          CHECK(close(got.selfmod[t][l * 5 + m], want.selfmod[t][l][m]));
        }
    CHECK(want.selfmod[0][0][0] > 1e-6);
  }
}
