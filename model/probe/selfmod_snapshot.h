// A hope block's self-modifying memories in a snapshot frame (SPEC §7, §8): per weight (W1, then
// W2), M and ΔM = M − M_before of every block's five memories (SelfModMemory order), batch row 0,
// shown as heads: [L·5, r', c'] stacks with their summaries (shown_matrices.h).
//
// On the CPU in float32, contiguous and shrunk (the default), with a shorter side up to
// kSmallSingularValueSide, they are measured where they lie, ΔM made a group at a time
// (show_host_matrices); otherwise as stacks of ATen calls, the spectra in one batched call where
// they can be (singular_values_together).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "model/nn/language_model.h"
#include "model/probe/shown_matrices.h"

namespace memscope::model {

struct SelfModShown {
  int weight;          // 0: W1, 1: W2
  const char* tensor;  // "M" or "dM"
  int64_t full_rows, full_cols;
  ShownMatrices view;  // [L·5, r', c'], and its summary where shrunk
};

// `before`: per block, its self-modifying memories' {W1, W2} before the token (ProbeInputs::
// memory_before); null for no ΔM. `largest` as show_matrices takes it.
std::vector<SelfModShown> show_selfmod_memories(const LmState& state,
                                                const std::vector<std::vector<at::Tensor>>* before,
                                                int64_t largest);

}  // namespace memscope::model
