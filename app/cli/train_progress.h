// How `train` reports: one JSON line per log step when stdout is piped (or --json), a progress
// bar redrawn in place when it is a terminal.
#pragma once
#include <cstdint>
#include <string>

#include "model/train/trainer.h"

namespace memscope::app {

class TrainProgress {
 public:
  TrainProgress(bool json, int64_t total_steps);
  void step(const model::TrainStepResult& r);
  void eval(int64_t step, const model::EvalResult& r);
  void message(const std::string& text);  // a plain line (checkpoint written, interrupted…)

 private:
  void end_bar();
  bool json_;
  bool bar_drawn_ = false;
  int64_t total_;
};

// The JSON line for one step: step, loss, acc, lr, grad_norm, tokens_per_s, chunk.
std::string step_json(const model::TrainStepResult& r);

}  // namespace memscope::app
