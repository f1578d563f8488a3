// Engine: the live timeline source (DESIGN principles 1 and 2). It owns the branches (the main
// timeline and any forks) and runs them on the TimelineSource thread: a step advances every
// branch, and the model commands (knobs, resets, presets, checkpoints, rewind, fork) apply between
// steps. An exception or a NaN in a step pauses the engine with an error event; it stays alive and
// keeps taking commands.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/engine/timeline_source.h"

namespace memscope::model {

class Branch;

// The trainer's own loss for the batch being stepped into, computed by its chunkwise forward with
// the same weights: what the token-by-token losses must average to.
struct StepIntoReference {
  int64_t train_step = 0;  // 0: not stepping into a training step
  double loss = 0, acc = 0;
  int64_t tokens = 0;   // B·T: the batch stepped token by token
  int64_t targets = 0;  // the tokens the loss is taken over
};

struct EngineOptions {
  std::string preset = "demo-mqar";  // a preset name or .toml path
  std::vector<std::string> sets;     // KEY=VALUE knob overrides
  std::string checkpoint;            // when set, the run saved there (sets apply to its preset)
  std::string session;               // when set, the preset a session recorded (re-run from step 0)
  int64_t train_step = 0;            // > 0: step into this training step (Branch::step_into)
  std::function<void(const std::string&)> progress;  // one line before a long rebuild (the CLI's stderr)
};

class Engine : public TimelineSource {
 public:
  // Builds the main timeline on the caller's thread: a bad preset or checkpoint throws UserError
  // here. "start recording" writes a session (SessionWriter) unless set_recorder_factory says otherwise.
  explicit Engine(const EngineOptions& options);
  ~Engine() override;

  const StepIntoReference& step_into_reference() const { return step_into_; }

 protected:
  std::vector<Event> step() override;
  void apply(const Command& command, std::vector<Event>& events) override;
  Preset preset() const override;
  std::vector<int64_t> steps() const override;
  std::string graphs() const override;  // the main timeline's

 private:
  void publish_rings();
  std::vector<std::unique_ptr<Branch>> branches_;  // the source's thread only (after start)
  StepIntoReference step_into_;                    // set by the constructor, then constant
};

}  // namespace memscope::model
