// The linear memory's chunkwise form (SPEC §9) over many whole chunks in one call. The per-chunk
// loop (chunkwise_forward.cpp) runs about a hundred ATen calls a chunk, most of which do not depend
// on the chunk's start state: the windows and their weights, the decay coefficients, the q·φ
// products. Here those are taken for all chunks at once, with the chunks folded into the heads;
// only the recurrence (M_i, S_i) → (M_{i+1}, S_{i+1}) runs chunk by chunk, a dozen calls each, and
// the reads follow, batched again. Same dual form (linear_dual_form.h), same results to rounding;
// in training its backward is as short. On a GPU, where the training step is bound by kernel
// launches rather than arithmetic (README "On a GPU machine"), that is the step's length.
#pragma once
#include <ATen/core/Tensor.h>

#include "model/memory/memory_rule.h"
#include "model/memory/memory_state.h"

namespace memscope::model {

class MemoryLayerImpl;

// The projected tokens, heads first: phi, q [B,H,T,d_φ], v [B,H,T,d_v]; the gates [B,H,T].
struct ChunkScanInputs {
  at::Tensor phi, q, v, alpha, eta, beta, gamma, delta;
};

// How many leading tokens of a T-token call linear_chunk_scan takes: every whole chunk, when the
// call starts on a chunk boundary and has at least two (one is the loop's own case), for the rules
// the linear dual form covers (linear memory; gd-momentum or dgd with one gate per head; l2-decay
// or no retention) and no record. 0 otherwise.
int64_t linear_chunk_scan_tokens(const MemoryRule& rule, const MemoryState& state, int64_t T, int64_t chunk,
                                 bool record);

// Reads those `tokens` tokens into the memory and returns y [B,H,tokens,d_v]; `state` moves past
// them (memory, momentum, window rings, token count), ending on a chunk boundary.
at::Tensor linear_chunk_scan(const MemoryLayerImpl& layer, const ChunkScanInputs& in, int64_t tokens,
                             int64_t chunk, MemoryState& state);

}  // namespace memscope::model
