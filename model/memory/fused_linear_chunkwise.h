// The chunkwise form of Titans' and DeltaNet's linear rules as one autograd function with an
// analytic backward (issue 20: a training step faster than eager PyTorch). See the .cpp.
#pragma once

#include <ATen/ATen.h>

namespace memscope::model {

// Per-token inputs are token-major, as MemoryLayerImpl::project() makes them.
struct LinearChunkwiseInputs {
  at::Tensor m0, s0;                 // [B,H,d_v,d_φ] the state the call starts from
  at::Tensor phi, q;                 // [B,T,H,d_φ] keys and queries after the feature map
  at::Tensor v;                      // [B,T,H,d_v]
  at::Tensor weight;                 // [B,T,H] the inner loss's weight γ_t·scale (SPEC §4, c = 1)
  at::Tensor alpha, eta, beta;       // [B,T,H] retain, lr, momentum (beta unused without momentum)
};

struct LinearChunkwiseOptions {
  int64_t chunk = 1;          // b: every gradient of a chunk is taken at the chunk-start M (SPEC §9)
  double clip = 0;            // the inner gradient's norm bound per token (0 = none)
  bool momentum = true;       // gd-momentum; false is dgd (M_t = α M − η g_t, S untouched)
  bool read_after = true;     // y_t = M_t q_t; false reads M_{t−1}
};

struct LinearChunkwiseOutputs {
  at::Tensor y;               // [B,T,H,d_v]
  at::Tensor m_end, s_end;    // [B,H,d_v,d_φ]
  at::Tensor anchor;          // [B,H,d_v,d_φ] the gradient point of the last (maybe open) chunk
};

// Differentiable in every input (through autograd, with the backward written out). CPU, float32
// or float64, T ≥ 1; the call starts at a chunk boundary.
LinearChunkwiseOutputs fused_linear_chunkwise(const LinearChunkwiseInputs& in, const LinearChunkwiseOptions& options);

}  // namespace memscope::model
