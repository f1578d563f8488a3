// One batch of a task: what the model reads, what it should predict, and where accuracy is counted.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace memscope::model {

// The target of a position that has no loss (the default ignore_index of cross_entropy).
inline constexpr int64_t kIgnoreIndex = -100;

struct Batch {
  at::Tensor tokens;      // [B,T] int64 model inputs
  at::Tensor targets;     // [B,T] int64 the token to predict at each position; kIgnoreIndex where no loss
  at::Tensor query_mask;  // [B,T] bool: positions counted for task accuracy (a subset of targets != ignore)

  // The same batch on `device` (tasks sample on the CPU; the model may run on a GPU).
  Batch to(const c10::Device& device) const { return {tokens.to(device), targets.to(device), query_mask.to(device)}; }
};

// A batch for the tasks to fill in: tokens 0, targets kIgnoreIndex, query_mask false.
// Throws std::invalid_argument when batch < 1.
Batch empty_batch(int64_t batch, int64_t seq_len);

}  // namespace memscope::model
