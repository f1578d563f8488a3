// The training knobs (`train.*`): the outer loop, its optimiser and schedule, and the TNT chunks.
#pragma once
#include <cstdint>

namespace memscope::model {

struct TrainConfig {
  int64_t steps = 200;         // train.steps
  int64_t batch = 16;          // train.batch: sequences per step
  int64_t micro_batch = 0;     // train.micro_batch: sequences per forward and backward (0 = the whole batch)
  double memory_limit_gb =
      0;  // train.memory_limit_gb: a CPU step's tensors at most (0 = what the machine has free)
  double lr = 3e-3;            // train.lr: peak AdamW learning rate
  double min_lr = 0.1;         // train.min_lr: cosine floor as a fraction of train.lr
  int64_t warmup = 20;         // train.warmup: linear warmup steps
  double weight_decay = 0.01;  // train.weight_decay (decoupled, AdamW)
  double beta1 = 0.9;          // train.beta1
  double beta2 = 0.99;         // train.beta2
  double eps = 1e-8;           // train.eps
  double clip = 1.0;           // train.clip: global gradient-norm clip (0 = off)
  int64_t bptt = 0;            // train.bptt: truncated-BPTT segment length (0 = whole sequence)
  int64_t chunk = 64;          // train.chunk: chunkwise b for stage 1 (TNT's large chunk)
  int64_t chunk_final = 0;     // train.chunk_final: b for stage 2 (0 = no second stage)
  double final_fraction = 0.2; // train.final_fraction: share of steps trained with chunk_final
  int64_t log_every = 10;      // train.log_every
  int64_t eval_every = 0;      // train.eval_every (0 = only at the end)
  int64_t eval_batches = 4;    // train.eval_batches
  uint64_t seed = 0;           // train.seed: initialisation and data
  bool module_norms = true;    // train.module_norms: per-module gradient norms and update ratios
  bool bf16_autocast = false;  // train.bf16_autocast: the forward's matrix products in bfloat16 (autocast)

  // The chunk size b in force at `step` (TNT's two stages).
  int64_t chunk_at(int64_t step) const {
    if (chunk_final <= 0) return chunk;
    const auto stage2_from = static_cast<int64_t>(static_cast<double>(steps) * (1.0 - final_fraction));
    return step >= stage2_from ? chunk_final : chunk;
  }
};

}  // namespace memscope::model
