// `train --serve`: the training run as a live Engine in train mode, served to viewers (issue 22).
// The same trainer steps as `train` alone (the same seed gives the same weights); what it adds is
// the engine's commands from a viewer: pause, step, live knobs, resets, checkpoints, recording,
// breakpoints.
#pragma once
#include <string>
#include <vector>

#include "app/cli/serve.h"

namespace memscope::app {

struct ServedTrain {
  std::string preset;             // a name or .toml (ignored with resume)
  std::vector<std::string> sets;  // with train.steps when --steps was given
  std::string resume, out, record;
  bool json = false, force = false;
  bool paused = false;  // wait for a viewer's run or step before the first step (--paused)
  ServeFlags serve;
};

// Trains to train.steps unless a viewer pauses it or it starts paused (it then waits for the
// viewer), or Ctrl+C stops it; writes --out at the end and on Ctrl+C. Throws UserError (one line)
// for bad input.
void train_served(const ServedTrain& t);

}  // namespace memscope::app
