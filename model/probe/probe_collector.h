// Probe collection (SPEC §8): turns a model state and, for a token step, the layers' StepRecords
// into a Frame's metrics. Every metric is computed on the model's device and the results leave it
// in one transfer (pinned and non-blocking on CUDA), never one per tensor.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "model/nn/language_model.h"
#include "model/probe/frame.h"
#include "model/probe/probe_config.h"
#include "model/probe/snapshot_buffers.h"

namespace memscope::model {

struct ProbeInputs {
  const LanguageModel* model = nullptr;
  const LmState* state = nullptr;  // after the step; batch row 0 is measured
  // Per layer, the memory weights before the step (for ΔM); null when unknown (train frames). A
  // hope block's entry is its self-modifying memories' {W1, W2} in SelfModMemory order (10 tensors).
  const std::vector<std::vector<at::Tensor>>* memory_before = nullptr;
  // Per layer, what the token step did; null for train frames.
  const std::vector<std::optional<StepRecord>>* records = nullptr;
  // Also take M, S, ΔM snapshots. Hope blocks: M and ΔM of each self-modifying memory's W1 and W2,
  // with the memory (k, v, eta, alpha, memory) as the snapshot's head (they have no momentum).
  bool matrices = false;
  // More 0-d tensors to bring back in the same transfer (e.g. the token's loss); their values are
  // returned by collect_probes in order.
  std::vector<at::Tensor> extra;
  // Where the fused path's snapshot values come from: buffers made ahead (the engine's, which
  // prepares them between snapshot frames); null: allocated as they are filled.
  SnapshotBuffers* snapshot_buffers = nullptr;
};

// Fills frame.layers/heads/weights/head_metrics/weight_metrics/matrices and returns the extras.
// Linear memories on the CPU take the fused path (fused_probes.h), everything else the general one.
std::vector<double> collect_probes(Frame& frame, const ProbeInputs& in, const ProbeConfig& config);

// The general path, for every model and device: batched ATen ops, one host transfer. Tests hold
// the fused path to it.
std::vector<double> collect_probes_general(Frame& frame, const ProbeInputs& in, const ProbeConfig& config);

}  // namespace memscope::model
