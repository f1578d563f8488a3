// The language model and its blocks (issue 4): step vs forward, split calls, the sliding window,
// RoPE, and that the outer gradient reaches every parameter.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "support/test_device.h"

#include "model/config/preset.h"
#include "model/nn/language_model.h"
#include "model/nn/rope.h"
#include "model/nn/sliding_window_attention.h"

namespace {

using namespace memscope::model;

// A small model of every block kind: window 3 and MAC segment 5, so 12 tokens cross several
// cache evictions and segment boundaries; float64 so step and forward can be held to 1e-9.
LanguageModel tiny_model(const std::string& block, const std::string& memory = "atlas", std::vector<std::string> sets = {}) {
  sets.insert(sets.begin(), {"model.block=" + block, "model.d_model=16", "model.layers=2", "model.memory_heads=2",
                           "model.attention_heads=2", "model.window=3", "model.segment=5", "model.persistent=2",
                           "memory.lr.max=10"});
  const Preset p = load_preset(memory, sets);
  LmConfig config = p.model;
  config.vocab = 11;
  torch::manual_seed(3);
  LanguageModel lm(config, p.memory);
  lm->to(memscope::test::test_device(), torch::kFloat64);
  return lm;
}

at::Tensor tokens(int64_t batch, int64_t length, uint64_t seed = 5) {
  torch::manual_seed(seed);
  return torch::randint(0, 11, {batch, length}, torch::kLong).to(memscope::test::test_device());
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("attention: the fused one-token step equals forward's general path, cache included", "[nn]") {
  // The fused step runs without autograd on the CPU in float32; with grad mode on, forward()
  // takes its general path on the same inputs. Windows 1, 3 and 8; with and without persistent tokens.
  for (const int64_t window : {1, 3, 8}) {
    for (const int64_t persistent : {0, 2}) {
      CAPTURE(window, persistent);
      AttentionOptions o;
      o.d_model = 16;
      o.heads = 2;
      o.window = window;
      o.persistent = persistent;
      torch::manual_seed(4);
      SlidingWindowAttention attention(o);
      const at::Tensor x = torch::randn({2, 12, 16});
      KvCache general = attention->empty_cache(2), fused = attention->empty_cache(2);
      for (int64_t t = 0; t < 12; ++t) {
        at::Tensor a;
        {
          torch::AutoGradMode on(true);
          a = attention->forward(x.narrow(1, t, 1), general).detach();
        }
        torch::NoGradGuard off;
        const at::Tensor b = attention->forward(x.narrow(1, t, 1), fused);
        CHECK(max_diff(a, b) < 1e-5);
        REQUIRE(general.k.sizes() == fused.k.sizes());
        CHECK(torch::allclose(general.k.detach(), fused.k, /*rtol=*/0, /*atol=*/1e-5));  // empty at window 1
        CHECK(torch::allclose(general.v.detach(), fused.v, 0, 1e-5));
        CHECK(torch::equal(general.positions, fused.positions));
        CHECK(general.next == fused.next);
      }
    }
  }
}

TEST_CASE("language model: step and forward with chunk 1 give the same logits for every block", "[nn]") {
  torch::NoGradGuard no_grad;
  for (const std::string memory : {"atlas", "titans-lmm", "deltanet"}) {
    for (const std::string block : {"lmm", "mag", "mal", "mac", "swa"}) {
      CAPTURE(memory, block);
      LanguageModel lm = tiny_model(block, memory);
      const at::Tensor x = tokens(2, 12);
      LmState a = lm->initial_state(2), b = lm->initial_state(2);
      const at::Tensor forward = lm->forward(x, a, 1);
      std::vector<at::Tensor> steps;
      for (int64_t t = 0; t < 12; ++t) steps.push_back(lm->step(x.select(1, t), b).logits);
      CHECK(max_diff(forward, at::stack(steps, 1)) < 1e-9);
      CHECK(a.position == 12);
      CHECK(b.position == 12);
    }
  }
}

TEST_CASE("language model: step with chunk b, token by token, gives forward(b)'s logits for every block", "[nn]") {
  // What "step into a training step" relies on: the trainer's chunkwise model, one token at a time.
  torch::NoGradGuard no_grad;
  for (const std::string memory : {"atlas", "titans-lmm"}) {
    for (const std::string block : {"lmm", "mag", "mal", "mac"}) {
      for (const std::string structure : {"linear", "mlp"}) {
        CAPTURE(memory, block, structure);
        LanguageModel lm = tiny_model(block, memory, {"memory.structure=" + structure});
        const at::Tensor x = tokens(2, 13);
        LmState a = lm->initial_state(2), b = lm->initial_state(2), c = lm->initial_state(2);
        const at::Tensor forward = lm->forward(x, a, 4);
        std::vector<at::Tensor> steps, exact;
        for (int64_t t = 0; t < 13; ++t) {
          steps.push_back(lm->step(x.select(1, t), b, 4).logits);
          exact.push_back(lm->step(x.select(1, t), c).logits);
        }
        CHECK(max_diff(forward, at::stack(steps, 1)) < 1e-9);
        CHECK(max_diff(forward, at::stack(exact, 1)) > 1e-7);  // b = 4 is not the exact step
      }
    }
  }
}

TEST_CASE("language model: a stream split into calls of any length equals one call", "[nn]") {
  torch::NoGradGuard no_grad;
  for (const std::string block : {"mag", "mal", "mac"}) {
    CAPTURE(block);
    LanguageModel lm = tiny_model(block);
    const at::Tensor x = tokens(2, 13);
    LmState whole = lm->initial_state(2), split = lm->initial_state(2);
    const at::Tensor one = lm->forward(x, whole, 4);
    const at::Tensor parts = at::cat({lm->forward(x.narrow(1, 0, 3), split, 4), lm->forward(x.narrow(1, 3, 7), split, 4),
                                      lm->forward(x.narrow(1, 10, 3), split, 4)},
                                     1);
    CHECK(max_diff(one, parts) < 1e-9);
  }
}

TEST_CASE("language model: step records what each layer's memory did", "[nn]") {
  torch::NoGradGuard no_grad;
  LanguageModel lm = tiny_model("mag");
  LmState s = lm->initial_state(1);
  const LmStepOutput out = lm->step(tokens(1, 1).select(1, 0), s);
  REQUIRE(out.records.size() == 2);
  for (const auto& r : out.records) {
    REQUIRE(r.has_value());
    CHECK(r->loss_before.sizes() == at::IntArrayRef{1, 2});
    CHECK(r->retain.sizes() == at::IntArrayRef{1, 2});
  }
  LanguageModel swa = tiny_model("swa");
  LmState t = swa->initial_state(1);
  CHECK_FALSE(swa->step(tokens(1, 1).select(1, 0), t).records[0].has_value());
}

TEST_CASE("language model: a step recorded for later gives the same logits, and records once finished", "[nn]") {
  // StepDetail::RecordLater, as the engine steps a probed token: every layer's record, its loss
  // after the write left to finish_record() (the MLP memory takes the general step).
  torch::NoGradGuard no_grad;
  LanguageModel lm = tiny_model("mag", "atlas");
  LmState now = lm->initial_state(1), later = lm->initial_state(1);
  const at::Tensor x = tokens(1, 5);
  for (int64_t t = 0; t < 5; ++t) {
    const LmStepOutput a = lm->step(x.select(1, t), now, 1, StepDetail::Record);
    LmStepOutput b = lm->step(x.select(1, t), later, 1, StepDetail::RecordLater);
    CHECK(torch::equal(a.logits, b.logits));
    REQUIRE(b.records.size() == 2);
    for (size_t l = 0; l < 2; ++l) {
      REQUIRE(b.records[l].has_value());
      CHECK_FALSE(b.records[l]->loss_after.defined());
      finish_record(*b.records[l], later.blocks[l].memory.memory);
      CHECK(torch::equal(a.records[l]->loss_after, b.records[l]->loss_after));
    }
  }
}

TEST_CASE("sliding-window attention sees exactly the last W tokens and the persistent tokens", "[nn]") {
  torch::NoGradGuard no_grad;
  // One swa layer: the output at position 9 depends on tokens 7, 8, 9 (W = 3) and nothing older.
  LanguageModel lm = tiny_model("swa", "atlas", {"model.layers=1"});
  const at::Tensor x = tokens(1, 10);
  auto last_logits = [&](const at::Tensor& input) {
    LmState s = lm->initial_state(1);
    return lm->forward(input, s, 1).select(1, 9);
  };
  const at::Tensor base = last_logits(x);
  for (int64_t changed = 0; changed < 10; ++changed) {
    at::Tensor y = x.clone();
    y.index_put_({0, changed}, (x.index({0, changed}).item<int64_t>() + 1) % 11);
    const bool visible = changed >= 7;
    CAPTURE(changed);
    CHECK((max_diff(last_logits(y), base) > 1e-9) == visible);
  }
}

TEST_CASE("RoPE keeps norms and makes scores depend only on the relative position", "[nn]") {
  torch::manual_seed(1);
  const at::Tensor q = torch::randn({1, 1, 1, 8}, torch::kFloat64), k = torch::randn({1, 1, 1, 8}, torch::kFloat64);
  auto at_pos = [](const at::Tensor& x, int64_t p) { return apply_rope(x, torch::tensor({p}), 10000.0); };
  CHECK(std::abs(at_pos(q, 37).norm().item<double>() - q.norm().item<double>()) < 1e-12);
  const double s1 = (at_pos(q, 10) * at_pos(k, 7)).sum().item<double>();
  const double s2 = (at_pos(q, 1003) * at_pos(k, 1000)).sum().item<double>();
  const double s3 = (at_pos(q, 10) * at_pos(k, 6)).sum().item<double>();
  CHECK(std::abs(s1 - s2) < 1e-9);
  CHECK(std::abs(s1 - s3) > 1e-6);
}

TEST_CASE("language model: the outer gradient reaches every parameter, gates and M_0 included", "[nn]") {
  for (const std::string memory : {"atlas", "titans-lmm", "deltanet", "ttt-linear"}) {
    for (const std::string block : {"lmm", "mag", "mal", "mac", "swa"}) {
      CAPTURE(memory, block);
      LanguageModel lm = tiny_model(block, memory);
      LmState s = lm->initial_state(2);
      const at::Tensor x = tokens(2, 12);
      const at::Tensor logits = lm->forward(x, s, 4);
      at::nll_loss(at::log_softmax(logits.reshape({-1, 11}), -1), tokens(2, 12, 9).reshape({-1})).backward();
      for (const auto& p : lm->named_parameters()) {
        CAPTURE(p.key());
        REQUIRE(p.value().grad().defined());
        CHECK(p.value().grad().abs().sum().item<double>() > 0.0);
      }
    }
  }
}

TEST_CASE("language model: with TTL off every memory stays at M_0", "[nn]") {
  torch::NoGradGuard no_grad;
  LanguageModel lm = tiny_model("mag", "atlas", {"model.ttl=false"});
  LmState s = lm->initial_state(2);
  const LmState start = s;
  lm->forward(tokens(2, 12), s, 4);
  lm->step(tokens(2, 1).select(1, 0), s);
  for (size_t b = 0; b < s.blocks.size(); ++b)
    for (size_t i = 0; i < s.blocks[b].memory.memory.size(); ++i)
      CHECK(torch::equal(s.blocks[b].memory.memory[i], start.blocks[b].memory.memory[i]));
  LanguageModel on = tiny_model("mag", "atlas");
  LmState t = on->initial_state(2);
  on->forward(tokens(2, 12), t, 4);
  CHECK_FALSE(torch::equal(t.blocks[0].memory.memory[0], start.blocks[0].memory.memory[0]));
}

TEST_CASE("language model: the HOPE LM's step and forward agree, and a split stream equals one call", "[nn]") {
  torch::NoGradGuard no_grad;
  for (const std::string block : {"hope", "hope-nested", "hope-conv", "lmm-cms"}) {
    CAPTURE(block);
    // hope: self-modifying Titans + CMS (also with the nested CMS); lmm-cms: per-feature dgd memory
    // + CMS (hope-cms-only).
    LanguageModel lm = block == "hope"          ? tiny_model("hope", "hope", {"model.cms.periods=1,2,5"})
                       : block == "hope-nested" ? tiny_model("hope", "hope", {"model.cms.periods=1,2,5", "model.cms.variant=nested"})
                       : block == "hope-conv"   ? tiny_model("hope", "hope", {"model.cms.periods=1,2,5", "model.hope.conv=true"})
                                                : tiny_model("lmm", "hope-cms-only", {"model.cms.periods=1,2,5"});
    REQUIRE(lm->block(0)->cms);
    CHECK(static_cast<bool>(lm->block(0)->selfmod) == (block != "lmm-cms"));
    const at::Tensor x = tokens(2, 12);
    LmState a = lm->initial_state(2), b = lm->initial_state(2), c = lm->initial_state(2);
    const at::Tensor forward = lm->forward(x, a, 1);
    std::vector<at::Tensor> steps;
    for (int64_t t = 0; t < 12; ++t) steps.push_back(lm->step(x.select(1, t), b).logits);
    CHECK(max_diff(forward, at::stack(steps, 1)) < 1e-9);
    const at::Tensor first = lm->forward(x.narrow(1, 0, 7), c, 1), second = lm->forward(x.narrow(1, 7, 5), c, 1);
    CHECK(max_diff(forward, at::cat({first, second}, 1)) < 1e-9);
    // Chunks of 4 (SPEC §9): the model's step equals the chunkwise forward, also split inside a
    // chunk. (HOPE's memories step through their chunkwise forms one token a call; their own tests
    // hold those to the per-token references.)
    LmState d = lm->initial_state(2), e = lm->initial_state(2), f = lm->initial_state(2);
    const at::Tensor chunked = lm->forward(x, d, 4);
    std::vector<at::Tensor> chunk_steps;
    for (int64_t t = 0; t < 12; ++t) chunk_steps.push_back(lm->step(x.select(1, t), e, 4).logits);
    CHECK(max_diff(chunked, at::stack(chunk_steps, 1)) < 1e-9);
    const at::Tensor head = lm->forward(x.narrow(1, 0, 6), f, 4), tail = lm->forward(x.narrow(1, 6, 6), f, 4);
    CHECK(max_diff(chunked, at::cat({head, tail}, 1)) < 1e-9);
    if (block != "lmm-cms") CHECK(max_diff(chunked, forward) > 1e-6);  // b = 4 is a different model
    // The CMS's slowest level (period 5) updated at tokens 5 and 10.
    CHECK(max_diff(a.blocks[0].cms.levels[2].weights[0], b.blocks[0].cms.levels[2].weights[0]) < 1e-9);
    CHECK(max_diff(a.blocks[0].cms.levels[2].weights[0][0], lm->block(0)->cms->w1_0[2]) > 1e-8);
    // The debugger's own path: float32 under no_grad, where on the CPU the memories take their
    // fused one-token steps, against this float64 forward.
    lm->to(torch::kFloat32);
    LmState g = lm->initial_state(2);
    std::vector<at::Tensor> debugger;
    for (int64_t t = 0; t < 12; ++t)
      debugger.push_back(lm->step(x.select(1, t), g, 4).logits.to(torch::kFloat64));
    CAPTURE(max_diff(chunked, at::stack(debugger, 1)));
    CHECK(max_diff(chunked, at::stack(debugger, 1)) < 1e-4 * (1 + chunked.abs().max().item<double>()));
  }
}

TEST_CASE("language model: HOPE's outer gradient reaches every parameter, aux loss included", "[nn]") {
  const auto variant = GENERATE(std::string("sequential"), std::string("nested"), std::string("conv"));
  CAPTURE(variant);
  LanguageModel lm = variant == "conv" ? tiny_model("hope", "hope", {"model.cms.periods=1,2,5", "model.hope.conv=true"})
                                       : tiny_model("hope", "hope", {"model.cms.periods=1,2,5", "model.cms.variant=" + variant});
  const at::Tensor x = tokens(1, 8);
  LmState state = lm->initial_state(1);
  const at::Tensor logits = lm->forward(x, state, 1);
  const at::Tensor aux = lm->take_aux_loss(state);
  REQUIRE(aux.defined());
  CHECK(aux.item<double>() > 0);
  CHECK(state.blocks[0].selfmod.aux.abs().sum().item<double>() == 0);  // taken: reset to zero
  (logits.pow(2).mean() + 0.1 * aux).backward();
  for (const auto& p : lm->named_parameters()) {
    CAPTURE(p.key());
    REQUIRE(p.value().grad().defined());
    CHECK(p.value().grad().abs().sum().item<double>() > 0);
  }
}

