// Step into a training step (issue 18): the engine steps batch S token by token, row by row, with
// the weights from before S and the trainer's chunk form, and the losses it computes average to the
// loss the trainer reports for that step. The reference is the trainer itself, run independently.
#include <unistd.h>

#include "model/train/trainer.h"

#include "engine/engine_test_support.h"
#include "support/temp_files.h"

using namespace memscope;
using namespace memscope::model;
using test::FrameLog;

namespace {

struct SteppedBatch {
  double loss = 0;  // mean over the scored tokens
  int64_t targets = 0, frames = 0, rows = 0;
  StepIntoReference reference;
};

SteppedBatch step_into(const EngineOptions& options) {
  Engine engine(options);
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(engine.step_into_reference().tokens));
  engine.wait_idle();
  SteppedBatch out;
  out.reference = engine.step_into_reference();
  double sum = 0;
  for (const Frame& f : log->frames) {
    ++out.frames;
    out.rows = std::max(out.rows, f.sequence + 1);
    CHECK(f.kind == FrameKind::Inspect);
    CHECK(f.train_step == options.train_step - 1);  // the weights from before step S
    if (f.target < 0) continue;
    REQUIRE(std::isfinite(f.loss));
    sum += f.loss;
    ++out.targets;
  }
  out.loss = sum / static_cast<double>(std::max<int64_t>(1, out.targets));
  return out;
}

}  // namespace

TEST_CASE("step into: batch S stepped token by token has the trainer's loss for step S (1e-5), every memory kind",
          "[engine]") {
  const int64_t S = 4;
  // chunk 2 (the small engine's): linear Atlas memory (Omega c = 4, Muon), its MLP memory, Titans'
  // rule on one MLP layer, and HOPE (its self-modifying memories' chunkwise form against their step
  // at the chunk-start anchor); the checked loss is the one train_step() reports, not a re-computation.
  for (const std::vector<std::string>& variant :
       {std::vector<std::string>{}, {"memory.structure=mlp"},
        {"model.block=lmm", "memory.structure=mlp", "memory.window.c=1", "memory.optimiser=gd-momentum"},
        {"model.block=hope", "model.ffn=cms", "model.cms.periods=\"1,3\"", "model.hope.conv=true"}}) {
    EngineOptions options = test::small_engine(variant);
    CAPTURE(options.sets);
    Trainer trainer(load_preset(options.preset, options.sets));
    TrainStepResult at_s;
    while (trainer.step() < S) at_s = trainer.train_step();
    REQUIRE(at_s.chunk == 2);

    options.train_step = S;
    const SteppedBatch b = step_into(options);
    const Batch batch = trainer.training_batch(S);
    CHECK(b.frames == batch.tokens.numel());
    CHECK(b.rows == batch.tokens.size(0));
    CHECK(b.targets == (batch.targets != kIgnoreIndex).sum().item<int64_t>());
    CHECK(std::abs(b.loss - at_s.loss) < 1e-5 * std::max(1.0, at_s.loss));
    CHECK(std::abs(b.reference.loss - at_s.loss) < 1e-5 * std::max(1.0, at_s.loss));
    CHECK(b.reference.train_step == S);
  }
}

TEST_CASE("step into: from a checkpoint, the re-run reaches the same weights as the uninterrupted run", "[engine]") {
  const auto dir = test::fresh_dir("step-into");
  EngineOptions options = test::small_engine({"train.steps=10"});
  Trainer trainer(load_preset(options.preset, options.sets));
  trainer.train_step();
  trainer.save(dir / "step1.safetensors");
  TrainStepResult at_s;
  while (trainer.step() < 5) at_s = trainer.train_step();

  EngineOptions from_checkpoint;
  from_checkpoint.checkpoint = (dir / "step1.safetensors").string();
  from_checkpoint.train_step = 5;
  const SteppedBatch b = step_into(from_checkpoint);
  CHECK(std::abs(b.loss - at_s.loss) < 1e-5 * std::max(1.0, at_s.loss));

  // The weights are from after step 1: step 1 itself cannot be stepped into from here, nor step 11.
  from_checkpoint.train_step = 1;
  CHECK_THROWS_WITH(Engine(from_checkpoint), Catch::Contains("needs weights from before it"));
  from_checkpoint.train_step = 11;
  CHECK_THROWS_WITH(Engine(from_checkpoint), Catch::Contains("beyond the run (train.steps = 10"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("step into: switching engine.inspect_batch live restarts the inspect stream on that batch", "[engine]") {
  EngineOptions options = test::small_engine();
  Engine engine(options);
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(3));
  engine.post(Command::set_knob("engine.inspect_batch", "2"));
  engine.post(Command::steps(2));
  engine.wait_idle();
  REQUIRE(log->frames.size() == 5);
  CHECK(log->frames[2].token_index == 2);
  CHECK(log->frames[3].token_index == 0);  // the new stream starts at its first token
  Trainer trainer(load_preset(options.preset, options.sets));
  CHECK(log->frames[3].token == trainer.training_batch(2).tokens[0][0].item<int64_t>());
  CHECK(log->frames[4].token == trainer.training_batch(2).tokens[0][1].item<int64_t>());
}
