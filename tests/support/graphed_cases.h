// The models the two CUDA graphs are tested on, shared by the graphs' equality tests
// (test_graphed_step.cpp, test_graphed_train_pass.cpp) and the host-read checks of their bodies
// (test_host_reads.cpp), so that a model added to one is checked by both.
#pragma once
#include <string>
#include <vector>

namespace memscope::test {

struct PresetCase {
  const char* preset;
  std::vector<std::string> sets;
};

// The inspect step's graph (model/nn/graphed_step.h).
inline std::vector<PresetCase> graphed_step_models() {
  return {
      {"demo-mqar", {}},                               // MAG, Atlas (Omega window, Muon), persistent tokens
      {"demo-mqar-titans", {}},                        // conv, gd-momentum, inner clip
      {"demo-mqar-titans", {"memory.structure=mlp"}},  // the MLP memory: autograd inside the step
      {"demo-mqar-titans", {"model.block=lmm"}},       // no attention: graphed from the first token
      {"demo-mqar", {"model.block=mal", "model.persistent=0"}},
  };
}

// The training pass's graph (model/train/graphed_train_pass.h).
inline std::vector<PresetCase> graphed_training_configs() {
  return {
      {"demo-mqar-titans", {}},                           // Titans: the linear memory's chunkwise form, conv
      {"demo-mqar", {}},                                  // Atlas: Omega window, Muon, persistent tokens
      {"demo-mqar-titans", {"memory.structure=mlp"}},     // the MLP memory
      {"demo-mqar", {"train.chunk=4", "train.bptt=6"}},   // truncated BPTT: two backwards in one pass
      {"demo-mqar-titans", {"train.module_norms=true"}},  // the norms measured outside the pass
      {"demo-mqar-titans", {"train.bf16_autocast=true"}},
  };
}

}  // namespace memscope::test
