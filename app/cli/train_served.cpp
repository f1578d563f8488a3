#include "app/cli/train_served.h"

#include <unistd.h>

#include <cmath>
#include <iostream>

#include "app/cli/interrupt.h"
#include "app/cli/train_progress.h"
#include "model/config/knobs.h"
#include "model/engine/engine.h"
#include "model/session/output_check.h"
#include "model/session/session_writer.h"
#include "model/train/checkpoint.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

using namespace memscope::model;

constexpr const char* kRestartWhy =
    "a restart knob rebuilds the model, which would throw away this run's trained steps; a served training run takes "
    "live knobs only";

// `train`'s progress lines, from the engine's train frames.
class ProgressSink : public FrameSink {
 public:
  ProgressSink(TrainProgress& progress, const Preset& preset, int64_t last)
      : progress_(progress), every_(std::max<int64_t>(1, preset.train.log_every)), chunk_(preset.train.chunk), last_(last) {}
  void on_frame(const Frame& f) override {
    if (f.kind != FrameKind::Train || (f.train_step % every_ != 0 && f.train_step != last_)) return;
    TrainStepResult r;
    r.step = f.train_step;
    r.loss = f.loss;
    r.acc = f.acc;
    r.lr = f.lr;
    r.grad_norm = f.grad_norm;
    r.tokens_per_s = f.tokens_per_s;
    r.seconds = f.seconds;
    r.chunk = chunk_;
    progress_.step(r);
  }
  void on_event(const Event&) override {}

 private:
  TrainProgress& progress_;
  int64_t every_, chunk_, last_;
};

}  // namespace

void train_served(const ServedTrain& t) {
  EngineOptions options;
  options.preset = t.preset;
  options.checkpoint = t.resume;
  options.sets = t.sets;
  options.sets.push_back("engine.mode=train");
  Engine engine(options);
  const Preset preset = engine.status().preset;
  // As `train`: the trainer stops at train.steps, counted from its first step, not this run's. A
  // resumed run has its checkpoint's steps already (the engine counts this run's from 0).
  const int64_t target = preset.train.steps;
  const int64_t trained = t.resume.empty() ? 0 : checkpoint_step(t.resume);  // the engine has read it whole
  const int64_t to_take = std::max<int64_t>(0, target - trained);
  auto done = [&] { return engine.status().steps.front(); };  // this run's steps
  auto trainer_step = [&] { return trained + done(); };
  if (!t.out.empty()) {
    std::vector<std::filesystem::path> inputs;
    if (!t.resume.empty()) inputs.emplace_back(t.resume);
    check_output({"--out", t.out, FileKind::Checkpoint, 16u << 20}, inputs, t.force);
  }
  if (!t.record.empty()) check_output({"--record", session_dir_for(t.record), FileKind::Session, 64u << 20}, {}, false);

  // The run ends at train.steps by the engine's last step, not by Step(n): commands queued behind
  // a Step(n) wait for all n steps, and a viewer's knob must land at the next step. A viewer drives
  // the run within it (a Run or Step it posts stops there, whenever it arrives); a restart would
  // throw the trained steps away.
  engine.set_last_step(to_take);  // 0 sets no bound, and admit then refuses every Run and Step
  auto admit = [&](const Command& c) {
    if ((c.kind == Command::Kind::Run || c.kind == Command::Kind::Step) && done() >= to_take)
      throw UserError("the run has trained all its " + std::to_string(target) + " steps");
    if (c.kind == Command::Kind::SetKnob && !knob_is_live(c.knob))
      throw UserError(c.knob + ": " + kRestartWhy);
    return c;
  };
  const std::string keeps = "a served training run keeps its preset and weights; change live knobs instead";
  const std::map<std::string, std::string> refused = {{kRestartKnob, kRestartWhy},
                                                      {command_name(Command::Kind::LoadPreset), keeps},
                                                      {command_name(Command::Kind::LoadCheckpoint), keeps}};
  TrainProgress progress(t.json || !isatty(STDOUT_FILENO), target);
  engine.add_sink(std::make_shared<ProgressSink>(progress, preset, target));
  auto server = serve(engine, t.serve, "train " + preset.name, refused, admit);
  engine.start();
  server->start();
  auto post_and_check = [&](Command c) {
    engine.post(std::move(c));
    engine.wait_idle();
    if (const std::string error = engine.status().last_error; !error.empty()) throw UserError(error);
  };
  catch_interrupts();
  if (!t.record.empty()) {
    post_and_check(Command::start_recording(t.record));
    progress.message("recording " + engine.status().recording);
  }
  if (done() < to_take && !t.paused) engine.post(Command::run());
  // Paused by a viewer or a breakpoint, the run waits for the viewer to go on.
  bool said_paused = false;
  while (!interrupted()) {
    const bool idle = engine.wait_idle_for(0.2);
    if (idle && done() >= to_take) break;
    if (idle && !said_paused) {
      const std::string error = engine.status().last_error;
      progress.message("paused at step " + std::to_string(trainer_step()) +
                       (error.empty() ? "" : " (" + error + ")") + "; a viewer resumes it");
    }
    said_paused = idle;
  }
  if (interrupted()) {
    engine.post(Command::pause());
    engine.wait_idle();
  }
  const int64_t at = trainer_step();
  if (!t.out.empty()) {
    Command save{Command::Kind::SaveCheckpoint};
    save.path = t.out;
    post_and_check(save);
    progress.message("checkpoint " + t.out + " at step " + std::to_string(at));
  }
  std::string recorded;
  if (!engine.status().recording.empty()) {
    recorded = engine.status().recording;
    post_and_check(Command{Command::Kind::StopRecording});
    progress.message("recorded " + recorded);
  }
  server->stop(interrupted() ? "the run was interrupted at step " + std::to_string(at)
                             : "the run finished at step " + std::to_string(at));
  engine.stop();
  if (interrupted())
    throw Interrupted("interrupted at step " + std::to_string(at) + (t.out.empty() ? "" : "; checkpoint " + t.out) +
                      (recorded.empty() ? "" : "; recorded " + recorded));
}

}  // namespace memscope::app
