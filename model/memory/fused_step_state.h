// What both fused steps (fused_linear_step.cpp, fused_window_step.cpp) leave in the state, as the
// general step does for an exact (chunk 1) step: the new M and S, one more token, no chunk anchor.
#pragma once
#include <ATen/core/Tensor.h>

#include "model/memory/memory_layer.h"  // StepOutput, MemoryState

namespace memscope::model {

inline StepOutput finish_fused_step(MemoryState& state, const at::Tensor& memory, const at::Tensor& momentum,
                                    const at::Tensor& y) {
  state.memory[0] = memory;
  state.momentum[0] = momentum;
  state.tokens += 1;
  state.anchor.clear();
  state.anchor_chunk = 0;
  StepOutput result;
  result.y = y;
  return result;
}

}  // namespace memscope::model
