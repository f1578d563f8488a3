// How `train` reports: one JSON line per log step when stdout is piped (or --json), a progress
// bar redrawn in place when it is a terminal.
#pragma once
#include <cstdint>
#include <string>

#include "model/train/trainer.h"

namespace memscope::app {

class TrainProgress {
 public:
  // `shown` false: a rank other than 0 of a data-parallel run, which reports nothing.
  TrainProgress(bool json, int64_t total_steps, bool shown = true);
  void step(const model::TrainStepResult& r);
  void eval(int64_t step, const model::EvalResult& r);
  void message(const std::string& text);  // a plain line (checkpoint written, interrupted…)

 private:
  void end_bar();
  bool json_;
  bool shown_;
  bool bar_drawn_ = false;
  int64_t total_;
};

// The JSON line for one step: step, loss, acc, lr, grad_norm, tokens_per_s, chunk; data-parallel
// steps add world_size and comm_share (the step's share of wall time inside collectives).
std::string step_json(const model::TrainStepResult& r);

}  // namespace memscope::app
