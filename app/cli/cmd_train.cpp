// memscope-cli train: the outer loop on a preset, with checkpoints and resume (issue 4).
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/interrupt.h"
#include "app/cli/train_progress.h"
#include "model/config/preset.h"
#include "model/engine/train_frame.h"
#include "model/session/output_check.h"
#include "model/probe/detectors.h"
#include "model/session/session_writer.h"
#include "model/train/trainer.h"
#include "model/util/device.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

struct TrainOptions {
  std::string preset = "demo-mqar";
  bool preset_given = false;
  std::vector<std::string> sets;
  int64_t steps = -1;
  std::string out;
  bool out_given = false;  // --out "" is an error, not "no checkpoint"
  std::string resume;
  std::string record;
  int64_t save_every = 0;
  bool json = false;
  bool force = false;
  int threads = 0;
};

// The inputs an output must not overwrite: a preset given as a file, the checkpoint resumed from.
std::vector<std::filesystem::path> train_inputs(const TrainOptions& o) {
  std::vector<std::filesystem::path> inputs;
  std::error_code ec;
  if (std::filesystem::is_regular_file(o.preset, ec)) inputs.emplace_back(o.preset);
  if (!o.resume.empty()) inputs.emplace_back(o.resume);
  return inputs;
}

// Where a checkpoint goes when --out fails at the end (a disk filled up, a directory vanished):
// the run is written next to the temporary directory rather than thrown away.
std::filesystem::path rescue_path(const std::string& out) {
  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path dir = tmp && *tmp ? tmp : "/tmp";
  return dir / ("memscope-rescued-" + std::to_string(::getpid()) + "-" + std::filesystem::path(out).filename().string());
}

void run_train(const TrainOptions& o) {
  using namespace memscope::model;
  if (o.threads > 0) torch::set_num_threads(o.threads);
  if (!o.resume.empty() && o.preset_given)
    throw UserError("train: --resume continues with the preset stored in " + o.resume +
                    "; --preset does not apply (change knobs with --set)");
  std::vector<std::string> sets = o.sets;
  if (o.steps >= 0) sets.push_back("train.steps=" + std::to_string(o.steps));
  Trainer trainer = o.resume.empty() ? Trainer(load_preset(o.preset, sets)) : Trainer::resume(o.resume, sets);
  const TrainConfig& c = trainer.preset().train;
  // Every output is checked now, not after the run: its directory, its space, what it would overwrite.
  if (o.out_given) {
    int64_t parameter_bytes = 0;
    for (const auto& p : trainer.model()->parameters()) parameter_bytes += p.numel() * 4;
    // parameters and AdamW's two moments, plus the header and the preset
    check_output({"--out", o.out, FileKind::Checkpoint, static_cast<uint64_t>(3 * parameter_bytes + (1 << 20))},
                 train_inputs(o), o.force);
  }
  if (!o.record.empty()) check_output({"--record", session_dir_for(o.record), FileKind::Session, 64u << 20}, {}, false);
  TrainProgress progress(o.json || !isatty(STDOUT_FILENO), c.steps);
  if (!o.resume.empty())
    progress.message("resumed " + o.resume + " at step " + std::to_string(trainer.step()));

  // Ctrl+C or SIGTERM finishes the step in flight, saves (with --out), closes the recording and
  // stops: hours of training are not lost.
  catch_interrupts();
  auto save = [&] {
    if (o.out.empty()) return;
    try {
      trainer.save(o.out);
    } catch (const UserError& e) {
      const auto rescue = rescue_path(o.out);
      trainer.save(rescue);  // throws too when even that fails: the error then names both
      throw UserError(one_line(e.what()) + "; the run (step " + std::to_string(trainer.step()) + ") was saved to " +
                      rescue.string() + " instead");
    }
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
  int64_t frame_step = trainer.step();  // a resumed run's frames go on from its step
  while (!trainer.done() && !interrupted()) {
    const auto start = std::chrono::steady_clock::now();
    const TrainStepResult r = trainer.train_step();
    if (recording) {
      auto frame = train_frame(trainer, r, ++frame_step, 0, trainer.preset().probe);
      frame->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      try {
        recording->on_frame(*frame);
      } catch (const UserError&) {
        save();  // the disk failed for the recording: keep the training before saying so
        throw;
      }
      for (const Event& e : detectors.observe(*frame)) recording->on_event(e);
      for (const Event& e : recording->take_notices()) progress.message(e.message);
    }
    if (r.step % c.log_every == 0 || trainer.done()) progress.step(r);
    if (c.eval_every > 0 && r.step % c.eval_every == 0 && !trainer.done())
      progress.eval(r.step, trainer.evaluate(c.eval_batches));
    if (o.save_every > 0 && r.step % o.save_every == 0) save();
  }
  if (interrupted()) {
    save();
    if (recording) recording->close();
    throw Interrupted("interrupted at step " + std::to_string(trainer.step()) +
                      (o.out.empty() ? "" : "; checkpoint " + o.out) + (recording ? "; recorded " + recording->path() : ""));
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
  cmd->add_option("--preset,-p", o->preset, "Preset name (assets/presets) or .toml path")
      ->capture_default_str()
      ->each([o](const std::string&) { o->preset_given = true; });
  cmd->add_option("--steps,-n", o->steps, "Training steps (same as --set train.steps=N)")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--set,-s", o->sets, "Knob override KEY=VALUE (repeatable), e.g. --set train.lr=1e-3");
  cmd->add_option("--out,-o", o->out, "Write a checkpoint (safetensors) here at the end and on Ctrl+C")
      ->each([o](const std::string&) { o->out_given = true; });
  cmd->add_flag("--force", o->force, "Let --out overwrite the resumed checkpoint, the preset file or a file of another kind");
  cmd->add_option("--resume", o->resume, "Continue from this checkpoint (its preset, with --set on top)");
  cmd->add_option("--record", o->record, "Record every step's frame and events to a session DIR (NAME.memscope)");
  cmd->add_option("--save-every", o->save_every, "Also write --out every N steps")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--threads", o->threads, "Torch CPU threads (default: LibTorch's choice)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", o->json, "JSON lines even on a terminal");
  cmd->callback([o] { run_train(*o); });
}

}  // namespace memscope::app
