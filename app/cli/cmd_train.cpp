// memscope-cli train: the outer loop on a preset, with checkpoints and resume (issue 4).
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/train_progress.h"
#include "model/config/preset.h"
#include "model/engine/train_frame.h"
#include "model/probe/detectors.h"
#include "model/session/session_writer.h"
#include "model/train/trainer.h"
#include "model/util/device.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

std::atomic<bool> g_interrupted{false};

struct TrainOptions {
  std::string preset = "demo-mqar";
  std::vector<std::string> sets;
  int64_t steps = -1;
  std::string out;
  std::string resume;
  std::string record;
  int64_t save_every = 0;
  bool json = false;
  int threads = 0;
};

void run_train(const TrainOptions& o) {
  using namespace memscope::model;
  if (o.threads > 0) torch::set_num_threads(o.threads);
  std::vector<std::string> sets = o.sets;
  if (o.steps >= 0) sets.push_back("train.steps=" + std::to_string(o.steps));
  Trainer trainer = o.resume.empty() ? Trainer(load_preset(o.preset, sets)) : Trainer::resume(o.resume, sets);
  const TrainConfig& c = trainer.preset().train;
  TrainProgress progress(o.json || !isatty(STDOUT_FILENO), c.steps);
  if (!o.resume.empty())
    progress.message("resumed " + o.resume + " at step " + std::to_string(trainer.step()));

  // Ctrl+C finishes the step in flight, saves (with --out) and stops: hours of training are not lost.
  std::signal(SIGINT, [](int) { g_interrupted = true; });
  auto save = [&] {
    if (o.out.empty()) return;
    trainer.save(o.out);
    progress.message("checkpoint " + o.out + " at step " + std::to_string(trainer.step()));
  };
  // --record: every step's frame (probes per probe.*) and the detectors' events go to a session.
  std::unique_ptr<SessionWriter> recording;
  Detectors detectors(trainer.preset().detect);
  if (!o.record.empty()) {
    recording = std::make_unique<SessionWriter>(
        session_dir_for(o.record),
        session_info_for(trainer.preset(), describe_device(trainer.model()->embedding.device()), trainer.task().vocab_size()));
    progress.message("recording " + recording->path());
  }
  int64_t frame_step = 0;
  while (!trainer.done() && !g_interrupted) {
    const auto start = std::chrono::steady_clock::now();
    const TrainStepResult r = trainer.train_step();
    if (recording) {
      auto frame = train_frame(trainer, r, ++frame_step, 0, trainer.preset().probe);
      frame->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      recording->on_frame(*frame);
      for (const Event& e : detectors.observe(*frame)) recording->on_event(e);
      for (const Event& e : recording->take_notices()) progress.message(e.message);
    }
    if (r.step % c.log_every == 0 || trainer.done()) progress.step(r);
    if (c.eval_every > 0 && r.step % c.eval_every == 0 && !trainer.done())
      progress.eval(r.step, trainer.evaluate(c.eval_batches));
    if (o.save_every > 0 && r.step % o.save_every == 0) save();
  }
  if (g_interrupted) {
    save();
    if (recording) recording->close();
    throw std::runtime_error("interrupted at step " + std::to_string(trainer.step()));
  }
  progress.eval(trainer.step(), trainer.evaluate(c.eval_batches));
  save();
  if (recording) {
    recording->close();
    progress.message("recorded " + recording->path() + " (" + std::to_string(recording->stats().frames_written) + " frames)");
  }
}

}  // namespace

void register_train(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "Train a preset's model (JSON lines when piped, a progress bar on a terminal)");
  cmd->add_option("--preset,-p", o->preset, "Preset name (assets/presets) or .toml path")->capture_default_str();
  cmd->add_option("--steps,-n", o->steps, "Training steps (same as --set train.steps=N)")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--set,-s", o->sets, "Knob override KEY=VALUE (repeatable), e.g. --set train.lr=1e-3");
  cmd->add_option("--out,-o", o->out, "Write a checkpoint (safetensors) here at the end and on Ctrl+C");
  cmd->add_option("--resume", o->resume, "Continue from this checkpoint (its preset, with --set on top)");
  cmd->add_option("--record", o->record, "Record every step's frame and events to a session DIR (NAME.memscope)");
  cmd->add_option("--save-every", o->save_every, "Also write --out every N steps")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--threads", o->threads, "Torch CPU threads (default: LibTorch's choice)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", o->json, "JSON lines even on a terminal");
  cmd->callback([o] { run_train(*o); });
}

}  // namespace memscope::app
