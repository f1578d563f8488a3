// The training pass through fixed buffers, replayed as a CUDA graph (model/train/graphed_train_pass.h,
// issue 23), against the plain training step: the reports, every parameter and the last state,
// step by step. On the CPU the buffers are run eagerly (the plumbing: the batch and target count
// copied in, the pass's sums, the key); under MEMSCOPE_TEST_DEVICE=cuda the same tests capture the
// pass once and replay it.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "model/config/preset.h"
#include "model/train/graphed_train_pass.h"
#include "model/train/trainer.h"
#include "support/graphed_cases.h"
#include "support/small_preset.h"
#include "support/test_device.h"

namespace {

using namespace memscope::model;

// The trainer tests' small preset with the per-module norms off, as the GPU bench trains: the
// squared gradient norm is then the pass's. `extra` on top.
Preset small_preset(const std::string& name, std::vector<std::string> extra) {
  extra.insert(extra.begin(), "train.module_norms=false");
  return memscope::test::small_preset(name, extra);
}

bool capturing() { return memscope::test::test_device().is_cuda() && GraphedTrainPass::capture_available(); }

// A replayed graph runs the kernels of its capture, whose inputs are the fixed buffers; cuBLAS may
// pick others than the plain step's. On the CPU the buffers run eagerly: the same bits.
double tolerance() { return capturing() ? 1e-4 : 0.0; }

void check_close(double got, double want, const char* what) {
  INFO(what << ": " << got << " against " << want);
  if (std::isnan(want))
    CHECK(std::isnan(got));
  else
    CHECK(std::abs(got - want) <= tolerance() * std::max(1.0, std::abs(want)));
}

void check_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.defined() == want.defined());
  if (!want.defined() || want.numel() == 0) return;
  REQUIRE(got.sizes() == want.sizes());
  const double scale = std::max(1.0, want.abs().max().item<double>());
  CHECK((got - want).abs().max().item<double>() <= tolerance() * scale);
}

void check_same_step(const TrainStepResult& got, const TrainStepResult& want) {
  CHECK(got.step == want.step);
  check_close(got.loss, want.loss, "loss");
  check_close(got.acc, want.acc, "accuracy");
  check_close(got.grad_norm, want.grad_norm, "gradient norm");
  CHECK(got.row_tokens == want.row_tokens);
  CHECK(got.row_targets == want.row_targets);
  REQUIRE(got.row_loss.size() == want.row_loss.size());
  for (size_t i = 0; i < want.row_loss.size(); ++i)
    check_close(got.row_loss[i], want.row_loss[i], "row 0's loss");
}

void check_same_trainers(const Trainer& got, const Trainer& want) {
  const auto a = got.model()->named_parameters(), b = want.model()->named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) check_close(a[i].value(), b[i].value(), a[i].key());
  const LmState &s = got.last_state(), &t = want.last_state();
  REQUIRE(s.blocks.size() == t.blocks.size());
  for (size_t l = 0; l < s.blocks.size(); ++l)
    for (size_t i = 0; i < t.blocks[l].memory.memory.size(); ++i)
      check_close(s.blocks[l].memory.memory[i], t.blocks[l].memory.memory[i], "last state's memory");
}

}  // namespace

TEST_CASE("graphed training pass: every step equals the plain step, parameters and last state included",
          "[train][graph]") {
  for (const memscope::test::PresetCase& c : memscope::test::graphed_training_configs()) {
    CAPTURE(c.preset, c.sets);
    Trainer plain(small_preset(c.preset, c.sets)), graphed(small_preset(c.preset, c.sets));
    graphed.use_graphed_pass(capturing());
    for (int i = 0; i < 3; ++i) {
      CAPTURE(i);
      const TrainStepResult want = plain.train_step(), got = graphed.train_step();
      check_same_step(got, want);
      check_same_trainers(graphed, plain);
    }
    if (capturing()) {
      CHECK(graphed.graphed_pass()->captures() == 1);  // one capture, then replays
      CHECK(graphed.graphed_pass()->replays() == 3);
      CHECK(graphed.graphed_pass()->failure().empty());
    }
  }
}

TEST_CASE("graphed training pass: a live knob or a new chunk size captures again, and a gate override steps aside",
          "[train][graph]") {
  const std::vector<std::string> sets{"train.chunk=4", "train.chunk_final=8", "train.final_fraction=0.5"};
  Trainer plain(small_preset("demo-mqar-titans", sets)), graphed(small_preset("demo-mqar-titans", sets));
  graphed.use_graphed_pass(capturing());
  auto both = [&](int steps) {
    for (int i = 0; i < steps; ++i) check_same_step(graphed.train_step(), plain.train_step());
    check_same_trainers(graphed, plain);
  };
  both(2);
  // A live knob (memory.lr.max): the rule the graph was captured with changes.
  for (Trainer* t : {&plain, &graphed}) {
    Preset p = t->preset();
    p.memory.max_lr *= 0.5;
    t->apply_live(p);
  }
  both(1);
  // A gate override: its values come from the host at every step, so that step is the plain one.
  for (Trainer* t : {&plain, &graphed})
    t->model()->block(0)->memory->set_override(Gate::Lr, {GateOverride::Mode::Multiply, {0.5}});
  const int64_t replays = graphed.graphed_pass()->replays();
  both(1);
  CHECK(graphed.graphed_pass()->replays() == replays);
  for (Trainer* t : {&plain, &graphed}) t->model()->block(0)->memory->clear_overrides();
  // The second chunk stage (train.chunk_final from step 4 of 8, train.final_fraction).
  both(2);
  CHECK(plain.train_step().chunk == 8);
  graphed.train_step();
  if (capturing()) CHECK(graphed.graphed_pass()->captures() == 3);  // steps 0, 2 and 4
}

TEST_CASE("graphed training pass: a non-finite step leaves the parameters, and training goes on",
          "[train][graph]") {
  Trainer plain(small_preset("demo-mqar-titans", {})), graphed(small_preset("demo-mqar-titans", {}));
  graphed.use_graphed_pass(capturing());
  check_same_step(graphed.train_step(), plain.train_step());
  // A NaN gate for one step: both refuse it the same way.
  for (Trainer* t : {&plain, &graphed}) {
    t->model()->block(0)->memory->set_override(Gate::Lr, {GateOverride::Mode::Constant, {std::nan("")}});
    CHECK_THROWS_WITH(t->train_step(), Catch::Contains("is not finite; the parameters were not updated"));
    t->model()->block(0)->memory->clear_overrides();
  }
  check_same_trainers(graphed, plain);
  for (int i = 0; i < 2; ++i) check_same_step(graphed.train_step(), plain.train_step());
  check_same_trainers(graphed, plain);
}

TEST_CASE("graphed training pass: a capture that fails says why, and training goes on eagerly, the same bits",
          "[train][graph]") {
  // As the graphed step's: asked to capture a CPU model's pass, the capture fails, and every pass
  // runs on the buffers eagerly (GraphedTrainPass::run).
  if (memscope::test::test_device().is_cuda()) return;  // there it captures (the tests above)
  Trainer plain(small_preset("demo-mqar-titans", {})), graphed(small_preset("demo-mqar-titans", {}));
  graphed.use_graphed_pass(/*capture=*/true);
  for (int i = 0; i < 3; ++i) check_same_step(graphed.train_step(), plain.train_step());
  check_same_trainers(graphed, plain);
  CHECK_THAT(graphed.graphed_pass()->failure(), Catch::Contains("a CUDA graph records CUDA work"));
  CHECK(graphed.graphed_pass()->captures() == 0);
  CHECK(graphed.graphed_pass()->replays() == 0);
}
