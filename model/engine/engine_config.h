// The engine knobs (`engine.*`): what the backend thread runs, and the memory it may keep for
// frames and for the keyframes that rewind and fork restore.
#pragma once
#include <cstdint>
#include <string>

namespace memscope::model {

enum class EngineMode { Train, Inspect, TrainInspect };
const char* to_string(EngineMode mode);  // "train", "inspect", "train+inspect"

struct EngineConfig {
  EngineMode mode = EngineMode::Inspect;  // engine.mode
  int64_t inspect_every = 50;        // engine.inspect_every: train+inspect re-steps the probe sequence every N train steps
  int64_t inspect_tokens = 0;        // engine.inspect_tokens: tokens per re-step in train+inspect (0 = one probe sequence)
  int64_t probe_seed = 1;            // engine.probe_seed: which task sequences inspect steps through
  int64_t inspect_batch = 0;         // engine.inspect_batch: inspect steps training step N's batch, row by row,
                                     // with that step's chunk (the step into a training step); 0 = probe sequences
  double frame_budget_mb = 256.0;    // engine.frame_budget_mb: memory for the frame ring
  int64_t keyframe_every = 32;       // engine.keyframe_every: engine steps between keyframes
  double keyframe_budget_mb = 512.0; // engine.keyframe_budget_mb: memory for keyframes (older ones are thinned)
  bool overlap = true;               // engine.overlap: measure this inspect token's probes on a second thread
                                     // while the next token steps; with forks the other way round (CPU
                                     // models; the frames are the same; branch.h's SideJob)
  bool cuda_graph = true;            // engine.cuda_graph: a CUDA model's inspect step and training pass as CUDA
                                     // graphs (model/nn/graphed_step.h, model/train/graphed_train_pass.h)
};

}  // namespace memscope::model
