// The frame of one training step: the outer numbers and, when probe.every says so, the probes of
// the memory state the step left (SPEC §8). The engine's train mode and `memscope-cli train
// --record` both make their frames here.
#pragma once
#include <memory>

#include "model/probe/frame.h"
#include "model/probe/probe_config.h"
#include "model/train/trainer.h"

namespace memscope::model {

// `step` counts engine steps (from 1); `r` is what trainer.train_step() just returned.
std::shared_ptr<Frame> train_frame(const Trainer& trainer, const TrainStepResult& r, int64_t step, int timeline,
                                   const ProbeConfig& probe);

}  // namespace memscope::model
