// The training backend (issue 4): AdamW against LibTorch's, the schedule, truncated BPTT,
// checkpoints, resume, and that a short run learns.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "model/config/preset.h"
#include "model/data/batch.h"
#include "model/train/adamw.h"
#include "model/train/checkpoint.h"
#include "model/train/lr_schedule.h"
#include "model/train/trainer.h"
#include "model/util/errors.h"
#include "support/small_preset.h"
#include "support/test_device.h"

namespace {

using namespace memscope::model;
namespace fs = std::filesystem;

using memscope::test::small_preset;

fs::path temp_file(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "memscope-tests";
  fs::create_directories(dir);
  return dir / name;
}

}  // namespace

TEST_CASE("AdamW matches torch::optim::AdamW step for step", "[train]") {
  torch::manual_seed(0);
  const at::Tensor init = torch::randn({5, 3}, torch::kFloat64);
  at::Tensor ours = init.clone().requires_grad_(true), theirs = init.clone().requires_grad_(true);
  AdamW mine({{"w", ours}}, AdamWOptions{0.9, 0.99, 1e-8, 0.1});
  torch::optim::AdamW reference({theirs}, torch::optim::AdamWOptions(0.01).betas({0.9, 0.99}).eps(1e-8).weight_decay(0.1));
  for (int step = 0; step < 6; ++step) {
    const at::Tensor target = torch::randn({5, 3}, torch::kFloat64);
    for (at::Tensor* p : {&ours, &theirs}) {
      if (p->grad().defined()) p->mutable_grad() = at::Tensor();
      ((*p - target).pow(3).sum()).backward();
    }
    mine.step(0.01);
    reference.step();
    CHECK((ours - theirs).abs().max().item<double>() < 1e-12);
  }
  CHECK(mine.steps() == 6);
}

TEST_CASE("clip_grad_norm returns the norm before clipping and scales to the limit", "[train]") {
  at::Tensor a = torch::zeros({2}, torch::kFloat64).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0, 4.0}, torch::kFloat64);
  CHECK(clip_grad_norm({{"a", a}}, 1.0) == Approx(5.0));
  CHECK(a.grad().norm().item<double>() == Approx(1.0).epsilon(1e-5));
  CHECK(clip_grad_norm({{"a", a}}, 0.0) == Approx(1.0).epsilon(1e-5));  // 0: measure only
}

TEST_CASE("learning rate: linear warmup, cosine to the floor, TNT chunk stages", "[train]") {
  TrainConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup = 10;
  c.steps = 110;
  CHECK(learning_rate_at(c, 0) == Approx(0.1));
  CHECK(learning_rate_at(c, 9) == Approx(1.0));
  CHECK(learning_rate_at(c, 10) == Approx(1.0));
  CHECK(learning_rate_at(c, 60) == Approx(0.55));
  CHECK(learning_rate_at(c, 110) == Approx(0.1));
  c.chunk = 64;
  c.chunk_final = 8;
  c.final_fraction = 0.25;
  c.steps = 100;
  CHECK(c.chunk_at(74) == 64);
  CHECK(c.chunk_at(75) == 8);
  c.chunk_final = 0;
  CHECK(c.chunk_at(99) == 64);
}

TEST_CASE("a short training run lowers the loss", "[train]") {
  Trainer trainer(small_preset("demo-mqar-titans", {"train.steps=40", "train.lr=1e-2", "memory.lr.max=10"}));
  const double before = trainer.evaluate(2).loss;
  double first = 0.0;
  while (!trainer.done()) {
    const TrainStepResult r = trainer.train_step();
    if (r.step == 1) first = r.loss;
    CHECK(std::isfinite(r.loss));
    CHECK(r.tokens_per_s > 0.0);
  }
  const double after = trainer.evaluate(2).loss;
  CAPTURE(first, before, after);
  CHECK(after < before - 0.1);
}

TEST_CASE("train.bf16_autocast: the same steps in bfloat16 stay close to float32, for every memory",
          "[train]") {
  // Autocast is per device type: on the CPU these are CPU bf16 products, the casts and dtype
  // mixes a GPU run meets (the memory state in float32 beside bf16 projections, the chunkwise
  // form's products, Muon's Newton-Schulz), checked here against the float32 run of the same steps.
  for (const auto& [preset, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"demo-mqar-titans", {}}, {"demo-mqar", {}}, {"demo-mqar-titans", {"memory.structure=mlp"}}}) {
    CAPTURE(preset, extra);
    std::vector<std::string> sets = extra;
    sets.push_back("train.steps=3");
    Trainer fp32(small_preset(preset, sets));
    sets.push_back("train.bf16_autocast=true");
    Trainer bf16(small_preset(preset, sets));
    for (int i = 0; i < 3; ++i) {
      const double want = fp32.train_step().loss, got = bf16.train_step().loss;
      CAPTURE(i, want, got);
      CHECK(std::isfinite(got));
      CHECK(got != want);                                    // the products did run in bf16
      CHECK(std::abs(got - want) <= 0.02 * std::abs(want));  // bf16 keeps 8 bits of mantissa
    }
    // The scope closes with the step: nothing after it runs in bf16.
    const at::Tensor a = torch::randn({4, 4}), b = torch::randn({4, 4});
    CHECK(at::matmul(a, b).scalar_type() == at::kFloat);
  }
}

TEST_CASE("HOPE: demo-mqar-hope trains with finite losses, and the aux loss enters the gradient", "[train]") {
  Trainer a(small_preset("demo-mqar-hope", {"model.cms.periods=1,4"}));
  Trainer b(small_preset("demo-mqar-hope", {"model.cms.periods=1,4", "model.hope.aux_weight=0"}));
  const TrainStepResult ra = a.train_step(), rb = b.train_step();
  CHECK(std::isfinite(ra.loss));
  CHECK(std::isfinite(ra.grad_norm));
  // Same parameters and batch: the reported loss is the task's; the aux loss only adds gradient.
  CHECK(ra.loss == Approx(rb.loss).epsilon(1e-6));
  CHECK(ra.grad_norm != rb.grad_norm);
  for (int i = 0; i < 2; ++i) CHECK(std::isfinite(a.train_step().loss));
}

TEST_CASE("truncated BPTT carries the state: segment losses add up to the whole sequence's, HOPE's too",
          "[train]") {
  // Same parameters, same batch: only the gradient differs (detached between segments), so the
  // first step's loss is equal with and without segments. HOPE's memories and the CMS take their
  // inner gradients with autograd, also of weights a segment boundary cut from the graph.
  for (const std::string name : {"demo-mqar", "demo-mqar-hope"}) {
    INFO(name);
    Trainer whole(small_preset(name, {"train.chunk=4"}));
    Trainer cut(small_preset(name, {"train.chunk=4", "train.bptt=6"}));
    const TrainStepResult a = whole.train_step(), b = cut.train_step();
    CHECK(a.loss == Approx(b.loss).epsilon(1e-5));
    CHECK(a.acc == b.acc);
    CHECK(a.grad_norm != b.grad_norm);
  }
}

TEST_CASE("a training step reports row 0 of its batch: the tokens, targets and each target's loss", "[train]") {
  // With one row the batch loss is the mean of the row's token losses; with segments (train.bptt)
  // too, since they are read segment by segment. The tokens are the batch the step drew.
  for (const std::string bptt : {"train.bptt=0", "train.bptt=6"}) {
    INFO(bptt);
    Trainer trainer(small_preset("demo-mqar", {"train.batch=1", bptt}));
    const Batch batch = trainer.training_batch(1);
    const TrainStepResult r = trainer.train_step();
    const int64_t T = batch.tokens.size(1);
    REQUIRE(static_cast<int64_t>(r.row_tokens.size()) == T);
    REQUIRE(static_cast<int64_t>(r.row_targets.size()) == T);
    REQUIRE(static_cast<int64_t>(r.row_loss.size()) == T);
    double sum = 0;
    int scored = 0;
    for (int64_t t = 0; t < T; ++t) {
      CHECK(r.row_tokens[static_cast<size_t>(t)] == batch.tokens[0][t].item<int64_t>());
      const int64_t target = batch.targets[0][t].item<int64_t>();
      CHECK(r.row_targets[static_cast<size_t>(t)] == (target == kIgnoreIndex ? -1 : target));
      const float loss = r.row_loss[static_cast<size_t>(t)];
      CHECK(std::isfinite(loss) == (target != kIgnoreIndex));
      if (std::isfinite(loss)) sum += loss, ++scored;
    }
    REQUIRE(scored > 0);
    CHECK(sum / scored == Approx(r.loss).epsilon(1e-6));
  }
}

TEST_CASE("checkpoint round trip: identical logits after a reload", "[train]") {
  Trainer trainer(small_preset());
  trainer.train_step();
  trainer.train_step();
  const fs::path path = temp_file("roundtrip.safetensors");
  trainer.save(path);
  const Trainer loaded = Trainer::resume(path);
  CHECK(loaded.step() == 2);
  CHECK(loaded.preset().toml == trainer.preset().toml);

  torch::NoGradGuard no_grad;
  const at::Tensor tokens = trainer.task().sample(2, 99).tokens.to(trainer.device());
  LmState s1 = trainer.model()->initial_state(2), s2 = loaded.model()->initial_state(2);
  CHECK(torch::equal(trainer.model()->forward(tokens, s1, 4), loaded.model()->forward(tokens, s2, 4)));
}

TEST_CASE("resuming from a checkpoint reproduces the uninterrupted run exactly", "[train]") {
  std::vector<double> straight, resumed;
  {
    Trainer t(small_preset());
    while (!t.done()) straight.push_back(t.train_step().loss);
  }
  const fs::path path = temp_file("resume.safetensors");
  {
    Trainer t(small_preset());
    for (int i = 0; i < 3; ++i) resumed.push_back(t.train_step().loss);
    t.save(path);
  }
  Trainer t = Trainer::resume(path);
  while (!t.done()) resumed.push_back(t.train_step().loss);
  REQUIRE(straight.size() == 8);
  // Bit for bit on the CPU. On CUDA the backward's atomic adds (the embedding's, index_add) sum in
  // no fixed order, so two runs agree to float rounding, not bit for bit (README "On a GPU").
  if (memscope::test::test_device().is_cuda()) {
    for (size_t i = 0; i < straight.size(); ++i) CHECK(std::abs(resumed[i] - straight[i]) < 1e-5 * std::abs(straight[i]));
  } else {
    CHECK(resumed == straight);
  }
}

TEST_CASE("a corrupt or mismatched checkpoint is a clear error", "[train]") {
  Trainer trainer(small_preset());
  const fs::path good = temp_file("good.safetensors");
  trainer.save(good);
  const auto size = fs::file_size(good);

  const fs::path truncated = temp_file("truncated.safetensors");
  fs::copy_file(good, truncated, fs::copy_options::overwrite_existing);
  fs::resize_file(truncated, size / 2);
  CHECK_THROWS_AS(Trainer::resume(truncated), UserError);

  const fs::path garbage = temp_file("garbage.safetensors");
  std::ofstream(garbage) << "not a checkpoint at all";
  CHECK_THROWS_AS(Trainer::resume(garbage), UserError);

  CHECK_THROWS_WITH(Trainer::resume(temp_file("absent.safetensors")), Catch::Contains("not found"));

  // Parameters of another shape: the message names the parameter.
  const fs::path other = temp_file("other.safetensors");
  write_safetensors(other, {{"model/embedding", torch::zeros({3, 3})}},
                    {{"format", kCheckpointFormat}, {"config", trainer.preset().toml}, {"step", "1"},
                     {"optimiser_steps", "1"}});
  CHECK_THROWS_WITH(Trainer::resume(other), Catch::Contains("embedding") && Catch::Contains("shape"));

  // A model with another width cannot take these parameters.
  const Checkpoint ckpt = read_checkpoint(good);
  LanguageModel wider = build_model(small_preset("demo-mqar-titans", {"model.d_model=48"}), trainer.task().vocab_size());
  CHECK_THROWS_WITH(load_parameters(wider, ckpt), Catch::Contains("shape"));
}

TEST_CASE("presets: demo presets load, inherit and reject unknown knobs", "[train]") {
  const Preset demo = load_preset("demo-mqar");
  CHECK(demo.model.block == BlockKind::Mag);
  CHECK(demo.model.layers == 2);
  CHECK(demo.memory.optimiser == Optimiser::Muon);  // Atlas memory, inherited from atlas.toml
  const Preset titans = load_preset("demo-mqar-titans");
  CHECK(titans.memory.optimiser == Optimiser::GdMomentum);
  CHECK(titans.task.pairs == demo.task.pairs);
  const Preset swa = load_preset("demo-mqar-swa");
  CHECK_FALSE(swa.model.has_memory());
  // The no-memory baseline cannot see a pair from any query (the point of the experiment).
  CHECK(swa.model.window <= swa.task.gap);

  CHECK_THROWS_WITH(load_preset("demo-mqar", {"model.widht=3"}), Catch::Contains("model.widht"));
  CHECK_THROWS_WITH(load_preset("demo-mqar", {"train.lr=-1"}), Catch::Contains("train.lr"));
  CHECK_THROWS_WITH(load_preset("demo-mqar", {"model.block=moe"}), Catch::Contains("model.block"));
  // The resolved TOML gives the same preset back.
  const Preset again = parse_preset(demo.toml, "demo-mqar");
  CHECK(again.toml == demo.toml);
  CHECK(again.memory.to_json() == demo.memory.to_json());
}
