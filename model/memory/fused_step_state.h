// What both fused steps (fused_linear_step.cpp, fused_window_step.cpp) leave in the state, as the
// general step does: the new M and S, one more token, and the chunk's gradient point as the anchor
// while a chunk of b > 1 is open (none at chunk 1).
#pragma once
#include <ATen/ATen.h>

#include <algorithm>

#include "model/memory/memory_layer.h"  // StepOutput, MemoryState
#include "model/util/tensor_slab.h"

namespace memscope::model {

// The record of a probed fused step, [B,H,…] float32 for the per-head loops to fill: the fields
// sequential_step.cpp records for these rules (δ and the token's own γ are 1 here: no Huber bias,
// no γ gate). ns_output is added by the Muon step. One slab for them all (model/util/tensor_slab.h).
inline StepRecord allocate_fused_record(int64_t B, int64_t H, int64_t d, int64_t window, const at::TensorOptions& options) {
  TensorSlab slab(B * H * (3 * d + 7 + window + d * d), options.dtype(at::kFloat));
  StepRecord r;
  for (at::Tensor* t : {&r.phi_k, &r.phi_q, &r.v}) *t = slab.take({B, H, d});
  for (at::Tensor* t : {&r.retain, &r.lr, &r.momentum, &r.loss_before, &r.loss_after, &r.delta, &r.token_gamma})
    *t = slab.take({B, H});
  r.gamma = slab.take({B, H, window});
  r.gradient = {slab.take({B, H, d, d})};
  for (at::Tensor* t : {&r.delta, &r.token_gamma}) std::fill_n(t->data_ptr<float>(), B * H, 1.0f);
  return r;
}

inline StepOutput finish_fused_step(MemoryState& state, const at::Tensor& memory, const at::Tensor& momentum,
                                    const at::Tensor& y, StepRecord record = {}, int64_t chunk = 1,
                                    const at::Tensor& gradient_point = {}) {
  state.memory[0] = memory;
  state.momentum[0] = momentum;
  state.tokens += 1;
  if (chunk > 1 && state.tokens % chunk != 0) {  // sequential_step.cpp's rule
    state.anchor = {gradient_point};
    state.anchor_chunk = chunk;
  } else {
    state.anchor.clear();
    state.anchor_chunk = 0;
  }
  StepOutput result;
  result.y = y;
  result.record = std::move(record);
  return result;
}

}  // namespace memscope::model
