// MemoryState: reset policies (SPEC §5), per-head resets, clone, serialisation, and gate
// overrides (SPEC §9: an override with the current value changes nothing, bit for bit).
#include <catch2/catch.hpp>

#include "memory_test_support.h"
#include "model/util/errors.h"

using namespace memscope::model;
using namespace memscope::test;

namespace {

bool all_zero(const torch::Tensor& t) { return torch::all(t == 0).item<bool>(); }

MemoryState stepped(const MemoryLayer& layer, int64_t tokens, int64_t batch = 1) {
  auto x = make_input(batch, tokens, layer->d_model(), torch::kFloat64);
  MemoryState state = layer->initial_state(batch);
  layer->forward(x, state, 4);
  return state;
}

}  // namespace

TEST_CASE("memory: each momentum reset policy", "[model]") {
  torch::NoGradGuard no_grad;
  for (const char* policy : {"sequence", "batch", "never"}) {
    auto layer = make_layer(test_rule("atlas-linear", {std::string("memory.reset=") + policy}), 12, 2, torch::kFloat64);
    const std::string p = policy;
    for (Boundary boundary : {Boundary::Sequence, Boundary::Batch}) {
      MemoryState state = stepped(layer, 9);
      const torch::Tensor s = state.momentum[0].clone();
      REQUIRE_FALSE(all_zero(s));
      layer->begin(state, boundary);
      const bool kept = p == "never" || (p == "batch" && boundary == Boundary::Sequence);
      INFO("policy " << p << " boundary " << (boundary == Boundary::Sequence ? "sequence" : "batch"));
      CHECK(torch::equal(state.momentum[0], kept ? s : torch::zeros_like(s)));
      // The memory itself always starts afresh with a new sequence.
      CHECK(torch::equal(state.memory[0], layer->initial_state(1).memory[0]));
      CHECK(all_zero(state.ring_gamma));
      CHECK(state.tokens == 0);
    }
  }
}

TEST_CASE("memory: reset and reset_momentum act on the chosen heads only", "[model]") {
  torch::NoGradGuard no_grad;
  auto layer = make_layer(test_rule("titans-lmm", {"memory.window.c=3"}), 12, 3, torch::kFloat64);
  MemoryState state = stepped(layer, 7, 2);
  MemoryState before = state.clone();
  const MemoryState fresh = layer->initial_state(2);
  layer->reset(state, {1});
  for (size_t i = 0; i < state.memory.size(); ++i) {
    CHECK(torch::equal(state.memory[i].select(1, 1), fresh.memory[i].select(1, 1)));
    CHECK(all_zero(state.momentum[i].select(1, 1)));
    for (int64_t h : {0, 2}) {
      CHECK(torch::equal(state.memory[i].select(1, h), before.memory[i].select(1, h)));
      CHECK(torch::equal(state.momentum[i].select(1, h), before.momentum[i].select(1, h)));
    }
  }
  CHECK(all_zero(state.ring_gamma.select(1, 1)));
  CHECK_FALSE(all_zero(state.ring_gamma.select(1, 0)));

  state = before.clone();
  state.reset_momentum({2});
  CHECK(all_zero(state.momentum[0].select(1, 2)));
  CHECK(torch::equal(state.momentum[0].select(1, 0), before.momentum[0].select(1, 0)));
  CHECK(torch::equal(state.memory[0], before.memory[0]));

  state.reset_momentum();
  for (const auto& s : state.momentum) CHECK(all_zero(s));
  CHECK_THROWS_AS(state.reset_momentum({5}), memscope::model::UserError);
}

TEST_CASE("memory: a cloned or serialised state continues exactly like the original", "[model]") {
  torch::NoGradGuard no_grad;
  for (const char* preset : {"atlas", "moneta", "omeganet"}) {
    auto layer = make_layer(test_rule(preset), 12, 2, torch::kFloat64);
    MemoryState state = stepped(layer, 6);
    MemoryState copy = state.clone();
    MemoryState restored = MemoryState::from_map(state.to_map());
    auto x = make_input(1, 5, 12, torch::kFloat64, 99);
    auto y = layer->forward(x, state, 4).y;
    CHECK(torch::equal(layer->forward(x, copy, 4).y, y));
    CHECK(torch::equal(layer->forward(x, restored, 4).y, y));
    // The clone is independent: the original moved on, a fresh clone of the old state did not.
    CHECK_FALSE(torch::equal(state.memory[0], stepped(layer, 6).memory[0]));
  }
}

TEST_CASE("memory: overriding a gate with its own current value is a bit-for-bit no-op", "[model]") {
  torch::NoGradGuard no_grad;
  auto layer = make_layer(test_rule("yaad", {"memory.window.gamma=gated", "memory.window.c=3"}), 12, 3,
                          torch::kFloat32);
  auto x = make_input(1, 6, 12, torch::kFloat32);
  MemoryState state = layer->initial_state(1);
  layer->forward(x.slice(1, 0, 5), state, 1);
  const MemoryState start = state.clone();

  MemoryState plain = start.clone();
  auto reference = layer->step(x.select(1, 5), plain);
  const auto& r = reference.record;
  auto per_head = [](const torch::Tensor& t) {
    std::vector<double> v;
    for (int64_t h = 0; h < t.size(1); ++h) v.push_back(t[0][h].item<double>());
    return v;
  };
  const std::vector<std::pair<Gate, torch::Tensor>> gates{{Gate::Retain, r.retain}, {Gate::Lr, r.lr},
                                                          {Gate::Momentum, r.momentum}, {Gate::Gamma, r.token_gamma},
                                                          {Gate::HuberDelta, r.delta}};
  for (const auto& [gate, value] : gates) {
    INFO("gate " << to_string(gate));
    for (auto mode : {GateOverride::Mode::Constant, GateOverride::Mode::Multiply}) {
      layer->set_override(gate, {mode, mode == GateOverride::Mode::Constant ? per_head(value) : std::vector<double>{1.0}});
      MemoryState s = start.clone();
      auto out = layer->step(x.select(1, 5), s);
      CHECK(torch::equal(out.y, reference.y));
      CHECK(torch::equal(s.memory[0], plain.memory[0]));
      CHECK(torch::equal(s.momentum[0], plain.momentum[0]));
      layer->clear_overrides();
    }
    // A different value does change the step, so the comparison above can fail.
    std::vector<double> other = per_head(value);
    for (auto& o : other) o *= 0.5;
    layer->set_override(gate, {GateOverride::Mode::Constant, other});
    MemoryState s = start.clone();
    CHECK_FALSE(torch::equal(layer->step(x.select(1, 5), s).y, reference.y));
    layer->clear_overrides();
  }
  CHECK_THROWS_AS(layer->set_override(Gate::Lr, {GateOverride::Mode::Constant, {0.1, 0.2}}), UserError);
}
