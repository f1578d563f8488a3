// Engine: the live timeline source (DESIGN principles 1 and 2). It owns the branches (the main
// timeline and any forks) and runs them on the TimelineSource thread: a step advances every
// branch, and the model commands (knobs, resets, presets, checkpoints, rewind, fork) apply between
// steps. An exception or a NaN in a step pauses the engine with an error event; it stays alive and
// keeps taking commands.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/engine/timeline_source.h"

namespace memscope::model {

class Branch;

struct EngineOptions {
  std::string preset = "demo-mqar";  // a preset name or .toml path
  std::vector<std::string> sets;     // KEY=VALUE knob overrides
  std::string checkpoint;            // when set, the run saved there (sets apply to its preset)
};

class Engine : public TimelineSource {
 public:
  // Builds the main timeline on the caller's thread: a bad preset or checkpoint throws UserError
  // here. "start recording" writes a session (SessionWriter) unless set_recorder_factory says otherwise.
  explicit Engine(const EngineOptions& options);
  ~Engine() override;

 protected:
  std::vector<Event> step() override;
  void apply(const Command& command, std::vector<Event>& events) override;
  Preset preset() const override;
  std::vector<int64_t> steps() const override;

 private:
  void publish_rings();
  std::vector<std::unique_ptr<Branch>> branches_;  // the source's thread only (after start)
};

}  // namespace memscope::model
