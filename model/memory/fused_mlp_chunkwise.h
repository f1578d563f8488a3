// The MLP memory's chunkwise form for Titans' rule (gd with momentum, the l2 bias, a linear
// retention) as one loop per head, for inference on the CPU (issue 20). The ATen dual form
// (chunkwise_forward.cpp's mlp_dual_form) is the same math and stays the reference, autograd's
// path and every other device's; this one reads the projections once and runs its products through
// small_gemm.h, with no per-token weight and no ATen call inside the chunk.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace memscope::model {

// One chunk of n tokens for every batch row and head, float32 on the CPU, as the ATen dual form
// reads them. m = n + c − 1: the window ring's c − 1 keys come first.
struct MlpChunkInputs {
  at::Tensor keys, values;      // [B,H,m,d]: φ and v of the ring's keys, then the chunk's
  at::Tensor slot_weights;      // [B,H,n,c]: token t's loss weight of its window slot j (key t + j)
  at::Tensor queries;           // [B,H,n,d]: φ_q
  at::Tensor alpha, eta, beta;  // [B,H,n]: retention, learning rate, momentum
  std::vector<at::Tensor> gradient_point;    // W̄_1 [B,H,d,4d], W̄_2 [B,H,4d,d]: the chunk start's
  std::vector<at::Tensor> memory, momentum;  // W_0 and S_0 before the chunk's first token
  at::Tensor ln_weight, ln_bias;             // [H,d]
  double inner_clip = 0;                     // SPEC §4; 0 is off
  bool read_after_write = true;              // SPEC §8
};

struct MlpChunkOutputs {
  at::Tensor y;                              // [B,H,n,d]
  std::vector<at::Tensor> memory, momentum;  // W_n and S_n after the chunk's last token
};

MlpChunkOutputs fused_mlp_chunk(const MlpChunkInputs& in);

}  // namespace memscope::model
