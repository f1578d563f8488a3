// The inspect step on fixed buffers, replayed as a CUDA graph (model/nn/graphed_step.h, issue 23),
// against the plain step: logits, records and the whole state, token by token. On the CPU the
// buffers are stepped eagerly (the buffer logic: parities, a state from elsewhere, the host
// counters); under MEMSCOPE_TEST_DEVICE=cuda the same tests capture and replay graphs.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "model/config/preset.h"
#include "model/nn/graphed_step.h"
#include "model/nn/language_model.h"
#include "support/graphed_cases.h"
#include "support/test_device.h"

namespace {

using namespace memscope::model;

constexpr int64_t kVocab = 11;

LanguageModel model_of(const std::string& preset, std::vector<std::string> sets = {}) {
  const Preset p = load_preset(preset, sets);
  LmConfig config = p.model;
  config.vocab = kVocab;
  torch::manual_seed(7);
  LanguageModel lm(config, p.memory);
  lm->to(memscope::test::test_device());
  return lm;
}

at::Tensor stream(int64_t length, uint64_t seed = 5) {
  torch::manual_seed(seed);
  return torch::randint(0, kVocab, {length}, torch::kLong).to(memscope::test::test_device());
}

bool capturing() { return memscope::test::test_device().is_cuda() && GraphedStep::capture_available(); }

// CUDA graphs replay the kernels of the capture, whose inputs are contiguous buffers where the
// plain step reads views: cuBLAS may pick other kernels for them. On the CPU they are the same bits.
// The same bits where the CPU's own kernels run (the padded cache's fused attention included); a
// GPU, or the CPU in a GPU's forms (MEMSCOPE_CPU_KERNELS=0), sums a padded cache in another order.
double tolerance() { return cpu_kernels_on(memscope::test::test_device()) ? 0.0 : 2e-5; }

void check_close(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  INFO(what);
  REQUIRE(a.defined() == b.defined());
  if (!a.defined()) return;
  REQUIRE(a.sizes() == b.sizes());
  if (a.numel() == 0) return;
  const double scale = std::max(1.0, b.abs().max().item<double>());
  CHECK((a - b).abs().max().item<double>() <= tolerance() * scale);
}

void check_same_state(const LmState& a, const LmState& b) {
  REQUIRE(a.position == b.position);
  REQUIRE(a.blocks.size() == b.blocks.size());
  for (size_t l = 0; l < a.blocks.size(); ++l) {
    const MemoryState &x = a.blocks[l].memory, &y = b.blocks[l].memory;
    const std::string layer = "layer " + std::to_string(l) + " ";
    CHECK(x.tokens == y.tokens);
    CHECK(x.anchor_chunk == y.anchor_chunk);
    REQUIRE(x.memory.size() == y.memory.size());
    for (size_t i = 0; i < x.memory.size(); ++i) {
      check_close(x.memory[i], y.memory[i], layer + "memory " + std::to_string(i));
      check_close(x.momentum[i], y.momentum[i], layer + "momentum " + std::to_string(i));
    }
    check_close(x.ring_phi, y.ring_phi, layer + "ring_phi");
    check_close(x.ring_v, y.ring_v, layer + "ring_v");
    check_close(x.ring_gamma, y.ring_gamma, layer + "ring_gamma");
    check_close(x.conv, y.conv, layer + "conv");
    check_close(x.latent, y.latent, layer + "latent");
    KvCache p = a.blocks[l].attention;
    const KvCache& q = b.blocks[l].attention;
    CHECK(p.next == q.next);
    if (p.k.defined() && q.k.defined() && p.k.size(2) > q.k.size(2)) {
      // `a`'s cache padded to its window (GraphedStep::pad_caches): the padding lies at negative
      // positions, before the keys `b` holds.
      const int64_t padding = p.k.size(2) - q.k.size(2);
      CHECK(p.positions.narrow(0, 0, padding).max().item<int64_t>() < 0);
      p = {p.k.narrow(2, padding, q.k.size(2)), p.v.narrow(2, padding, q.k.size(2)),
           p.positions.narrow(0, padding, q.k.size(2)), p.next};
    }
    check_close(p.k, q.k, layer + "keys");
    check_close(p.v, q.v, layer + "values");
    check_close(p.positions, q.positions, layer + "positions");
  }
}

// `a` and `b` stepped into states `a_state` and `b_state`.
void check_same_records(LmStepOutput& a, const LmState& a_state, LmStepOutput& b, const LmState& b_state) {
  REQUIRE(a.records.size() == b.records.size());
  for (size_t l = 0; l < a.records.size(); ++l) {
    REQUIRE(a.records[l].has_value() == b.records[l].has_value());
    if (!a.records[l]) continue;
    finish_record(*a.records[l], a_state.blocks[l].memory.memory);
    finish_record(*b.records[l], b_state.blocks[l].memory.memory);
    check_close(a.records[l]->loss_before, b.records[l]->loss_before, "loss_before");
    check_close(a.records[l]->loss_after, b.records[l]->loss_after, "loss_after");
    check_close(a.records[l]->lr, b.records[l]->lr, "lr");
  }
}

// Steps `tokens` through the plain step and through `graphed` side by side, from the same start;
// returns how many tokens the graphed side took through its buffers.
int64_t step_both(const LanguageModel& lm, GraphedStep& graphed, const at::Tensor& tokens, LmState& plain,
                  LmState& buffered, StepDetail detail) {
  torch::NoGradGuard no_grad;
  int64_t taken = 0;
  for (int64_t t = 0; t < tokens.size(0); ++t) {
    CAPTURE(t);
    const at::Tensor token = tokens.narrow(0, t, 1);
    LmStepOutput want = lm->step(token, plain, 1, detail);
    const bool applies = GraphedStep::applies(*lm, buffered, 1);
    LmStepOutput got =
        applies ? graphed.step(*lm, token, buffered, detail) : lm->step(token, buffered, 1, detail);
    taken += applies;
    check_close(got.logits, want.logits, "logits");
    check_same_records(got, buffered, want, plain);
    check_same_state(buffered, plain);
  }
  return taken;
}

}  // namespace

TEST_CASE("graphed step: every token equals the plain step, state and records included", "[nn][graph]") {
  for (const memscope::test::PresetCase& c : memscope::test::graphed_step_models()) {
    for (const StepDetail detail : {StepDetail::OutputOnly, StepDetail::Record, StepDetail::RecordLater}) {
      CAPTURE(c.preset, c.sets, static_cast<int>(detail));
      const LanguageModel lm = model_of(c.preset, c.sets);
      GraphedStep graphed(capturing());
      LmState plain = lm->initial_state(1), buffered = lm->initial_state(1);
      const int64_t taken = step_both(lm, graphed, stream(20), plain, buffered, detail);
      CHECK(taken == 20);  // every token from the first: the growing caches padded to their window
      if (capturing()) {
        CHECK(graphed.captures() == 2);  // one per parity
        CHECK(graphed.replays() == taken);
      }
    }
  }
}

TEST_CASE("graphed step: a state from elsewhere (a rewind, a new sequence) is copied in and stepped right",
          "[nn][graph]") {
  torch::NoGradGuard no_grad;
  const LanguageModel lm = model_of("demo-mqar");
  GraphedStep graphed(capturing());
  const at::Tensor tokens = stream(24, 9);
  LmState plain = lm->initial_state(1), buffered = lm->initial_state(1);
  step_both(lm, graphed, tokens.narrow(0, 0, 12), plain, buffered, StepDetail::OutputOnly);
  // A keyframe: the state cloned at token 12, then five more tokens.
  LmState keyframe = buffered;
  for (auto& b : keyframe.blocks) {
    b.memory = b.memory.clone();
    for (auto* t : {&b.attention.k, &b.attention.v, &b.attention.positions}) *t = t->clone();
  }
  LmState plain_at_12 = plain;
  step_both(lm, graphed, tokens.narrow(0, 12, 5), plain, buffered, StepDetail::OutputOnly);
  // Back to the keyframe: the same five tokens again give the same states, through S0 again.
  step_both(lm, graphed, tokens.narrow(0, 12, 5), plain_at_12, keyframe, StepDetail::OutputOnly);
  check_same_state(keyframe, plain);
  if (capturing()) CHECK(graphed.captures() == 2);  // the buffers fit: no new capture
}

TEST_CASE("graphed step: after a knob change and reset() it steps the new rule", "[nn][graph]") {
  torch::NoGradGuard no_grad;
  LanguageModel lm = model_of("demo-mqar-titans");
  GraphedStep graphed(capturing());
  const at::Tensor tokens = stream(30, 11);
  LmState plain = lm->initial_state(1), buffered = lm->initial_state(1);
  step_both(lm, graphed, tokens.narrow(0, 0, 15), plain, buffered, StepDetail::RecordLater);
  MemoryRule rule = lm->rule();
  rule.max_lr *= 0.25;  // a live knob (memory.lr.max): the plain step reads it at once
  lm->set_live_rule(rule);
  graphed.reset();
  step_both(lm, graphed, tokens.narrow(0, 15, 15), plain, buffered, StepDetail::RecordLater);
  if (capturing()) CHECK(graphed.captures() == 4);  // two before, two after the reset
}

TEST_CASE("graphed step: where the shapes or the inputs are not fixed, it does not apply", "[nn][graph]") {
  torch::NoGradGuard no_grad;
  LanguageModel mag = model_of("demo-mqar");
  LmState s = mag->initial_state(1);
  CHECK(GraphedStep::applies(*mag, s, 1));  // an empty cache is padded to its window
  const at::Tensor tokens = stream(8);
  for (int64_t t = 0; t < 3; ++t) mag->step(tokens.narrow(0, t, 1), s, 1, StepDetail::OutputOnly);
  CHECK(GraphedStep::applies(*mag, s, 1));  // so is one that holds the stream's first tokens
  {
    // A short cache that lacks the stream's first keys cannot be padded at positions no query sees.
    LmState missing = s;
    KvCache& cache = missing.blocks[0].attention;
    cache = {cache.k.narrow(2, 1, 2), cache.v.narrow(2, 1, 2), cache.positions.narrow(0, 1, 2), cache.next};
    CHECK_FALSE(GraphedStep::applies(*mag, missing, 1));
  }
  for (int64_t t = 3; t < mag->config().window - 1; ++t)
    mag->step(tokens.narrow(0, t, 1), s, 1, StepDetail::OutputOnly);
  CHECK(GraphedStep::applies(*mag, s, 1));
  CHECK_FALSE(GraphedStep::applies(*mag, s, 4));  // the chunked step branches on the stream position
  // A gate override is copied from the host at every step.
  mag->block(0)->memory->set_override(Gate::Lr, {GateOverride::Mode::Multiply, {0.5}});
  CHECK_FALSE(GraphedStep::applies(*mag, s, 1));
  mag->block(0)->memory->clear_overrides();
  CHECK(GraphedStep::applies(*mag, s, 1));
  for (const auto& [preset, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"demo-mqar", {"model.block=mac"}}, {"demo-mqar-hope", {}}}) {
    CAPTURE(preset);
    const LanguageModel lm = model_of(preset, sets);
    LmState fresh = lm->initial_state(1);
    for (int64_t t = 0; t < 8; ++t) lm->step(tokens.narrow(0, t, 1), fresh, 1, StepDetail::OutputOnly);
    CHECK_FALSE(GraphedStep::applies(*lm, fresh, 1));
  }
}

TEST_CASE("graphed step: a cache padded to its window steps as the cache itself, on both attention paths",
          "[nn][graph]") {
  // The padding's keys lie at negative positions, which no query sees. The CPU's fused one-token
  // step skips them: the same bits. forward()'s general path (grad mode on, and every path on
  // CUDA) masks them: the same to rounding, as the softmax and the products sum over more slots.
  for (const bool general : {false, true}) {
    CAPTURE(general);
    const LanguageModel lm = model_of("demo-mqar", {"model.block=mal", "model.persistent=0"});
    const at::Tensor tokens = stream(lm->config().window + 4, 13);
    LmState plain = lm->initial_state(1);
    {
      torch::NoGradGuard no_grad;
      for (int64_t t = 0; t < 3; ++t) lm->step(tokens.narrow(0, t, 1), plain, 1, StepDetail::OutputOnly);
    }
    LmState padded = plain;
    GraphedStep::pad_caches(*lm, padded);
    REQUIRE(padded.blocks[0].attention.k.size(2) == lm->config().window - 1);
    for (int64_t t = 3; t < tokens.size(0); ++t) {  // across the point where the cache fills
      CAPTURE(t);
      torch::AutoGradMode grad(general);
      const at::Tensor want = lm->step(tokens.narrow(0, t, 1), plain, 1, StepDetail::OutputOnly).logits.detach();
      const at::Tensor got = lm->step(tokens.narrow(0, t, 1), padded, 1, StepDetail::OutputOnly).logits.detach();
      const bool same_bits = !general && cpu_kernels_on(memscope::test::test_device());
      if (same_bits)
        CHECK(torch::equal(got, want));
      else
        CHECK((got - want).abs().max().item<double>() <= 1e-5 * std::max(1.0, want.abs().max().item<double>()));
      torch::NoGradGuard no_grad;
      if (same_bits) check_same_state(padded, plain);  // the next layers' memories see the rounding
    }
  }
}

TEST_CASE("graphed step: a capture that fails says why, and the buffers step on eagerly, the same bits",
          "[nn][graph]") {
  // Asked to capture a CPU model's step (or in a build without CUDA), the first capture fails as one
  // with an op that cannot be captured does: the step goes on eagerly (GraphedStep::step).
  if (memscope::test::test_device().is_cuda()) return;  // there it captures (the tests above)
  const LanguageModel lm = model_of("demo-mqar-titans");
  GraphedStep graphed(/*capture=*/true);
  LmState plain = lm->initial_state(1), buffered = lm->initial_state(1);
  CHECK(step_both(lm, graphed, stream(12), plain, buffered, StepDetail::Record) == 12);
  CHECK_THAT(graphed.failure(), Catch::Contains("a CUDA graph records CUDA work") && Catch::Contains("cpu"));
  CHECK(graphed.captures() == 0);
  CHECK(graphed.replays() == 0);
}
