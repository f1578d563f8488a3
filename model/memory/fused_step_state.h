// What the fused steps (fused_linear_step.cpp, fused_window_step.cpp, fused_mlp_step.cpp) leave in
// the state, as the general step does: the new memory and momentum, one more token, and the
// chunk's gradient point as the anchor while a chunk of b > 1 is open (none at chunk 1); and the
// record of a probed one.
#pragma once
#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <vector>

#include "model/memory/memory_layer.h"  // StepOutput, MemoryState
#include "model/util/sum_of_squares.h"  // the records' weight_squares
#include "model/util/tensor_slab.h"

namespace memscope::model {

// The record of a probed fused step, [B,H,…] float32 for the per-head loops to fill: the fields
// sequential_step.cpp records for these rules (δ and the token's own γ are 1 here: no Huber bias,
// no γ gate), with one gradient per memory weight of `weights` shapes per head (a linear memory's
// {d,d}; the MLP's {d,4d}, {4d,d}; none for StepDetail::RecordLater). ns_output is added by the
// Muon steps. One slab for them all (model/util/tensor_slab.h).
using WeightShapes = std::vector<std::array<int64_t, 2>>;
inline StepRecord allocate_fused_record(int64_t B, int64_t H, int64_t d, int64_t window,
                                        const at::TensorOptions& options, const WeightShapes& weights) {
  int64_t weight_elements = 0;
  for (const auto& [rows, columns] : weights) weight_elements += rows * columns;
  TensorSlab slab(B * H * (3 * d + 7 + window + weight_elements), options.dtype(at::kFloat));
  StepRecord r;
  for (at::Tensor* t : {&r.phi_k, &r.phi_q, &r.v}) *t = slab.take({B, H, d});
  for (at::Tensor* t : {&r.retain, &r.lr, &r.momentum, &r.loss_before, &r.loss_after, &r.delta, &r.token_gamma})
    *t = slab.take({B, H});
  r.gamma = slab.take({B, H, window});
  for (const auto& [rows, columns] : weights) r.gradient.push_back(slab.take({B, H, rows, columns}));
  for (at::Tensor* t : {&r.delta, &r.token_gamma}) std::fill_n(t->data_ptr<float>(), B * H, 1.0f);
  return r;
}

// The new memory and momentum (one tensor per weight), one more token, and the anchor.
inline StepOutput finish_fused_step(MemoryState& state, std::vector<at::Tensor> memory,
                                    std::vector<at::Tensor> momentum, const at::Tensor& y,
                                    StepRecord record = {}, int64_t chunk = 1,
                                    std::vector<at::Tensor> gradient_point = {}) {
  state.memory = std::move(memory);
  state.momentum = std::move(momentum);
  state.tokens += 1;
  if (chunk > 1 && state.tokens % chunk != 0) {  // sequential_step.cpp's rule
    state.anchor = std::move(gradient_point);
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
