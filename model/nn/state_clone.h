// A deep copy of a model's state: the engine's keyframes, and the trainer's last state when its
// tensors belong to a CUDA graph that the next step rewrites (model/train/graphed_train_pass.h).
#pragma once
#include "model/nn/language_model.h"

namespace memscope::model {

// Every tensor copied: later steps (and in-place edits such as NaN injection) cannot reach it.
LmState clone_state(const LmState& state);

}  // namespace memscope::model
