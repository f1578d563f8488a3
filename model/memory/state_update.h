// The chunk-end update of a memory's weight or momentum in the dual form (SPEC §9;
// linear_dual_form.h's dual_end_state), per matrix of a stack:
//
//   out = a·M + c·S + xᵀ y          a, c one scalar per matrix [B,H]; M, S [B,H,p,q];
//                                   x [B,H,n,p], y [B,H,n,q] (a chunk's rank-1 writes)
//
// as one pass per matrix on the CPU, with its backward written out. Through ATen the same update is
// five weight-sized tensors written forward and about a dozen backward (each scale's product and
// its sum, the negations, the accumulations), for every weight of every chunk: at d_model 256 that
// traffic was a fifth of an MLP-memory training step. Here the matrices stay in cache: forward
// writes `out`, backward dM and dS, and reads G, M and S once.
//
// It takes over for float32 on the CPU (cpu_kernels_on, no CPU autocast) with every operand's batch
// the same; elsewhere, and always in float64, state_update_reference's ATen form runs. A backward
// taken with create_graph runs in ATen ops (batched_matmul.h), so it is differentiable again.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// S and c may be undefined (no momentum term).
at::Tensor state_update(const at::Tensor& a, const at::Tensor& m, const at::Tensor& c, const at::Tensor& s,
                        const at::Tensor& x, const at::Tensor& y);

// The same in ATen ops, differentiable to any order; the tests' reference.
at::Tensor state_update_reference(const at::Tensor& a, const at::Tensor& m, const at::Tensor& c,
                                  const at::Tensor& s, const at::Tensor& x, const at::Tensor& y);

// Whether state_update takes its own loop for these operands (for the tests).
bool state_update_applies(const at::Tensor& a, const at::Tensor& m, const at::Tensor& c, const at::Tensor& s,
                          const at::Tensor& x, const at::Tensor& y);

// gd-momentum's chunk end, the memory and its momentum from one function (SPEC §9):
//
//   memory   = a·M + c·S + xᵀy
//   momentum = b·S + uᵀy           a, c, b [B,H]; M, S [B,H,p,q]; x, u [B,H,n,p]; y [B,H,n,q]
//   start    = S                   the chunk's own reads of S take this view of it
//
// S has three uses, and autograd would write c·G_memory and b·G_momentum and add them to the reads'
// gradient two at a time, each a weight-sized pass (at d_model 256 those adds were 3% of an
// MLP-memory training step). Here the backward writes S's gradient in one pass, and y's in one
// accumulation. Where state_update's loop does not apply, the two ATen forms run and start is S.
struct MomentumEndOperands {
  at::Tensor a, m, c, s, x, b, u, y;
};
struct MomentumEnd {
  at::Tensor memory, momentum, start;
};
MomentumEnd momentum_end_update(const MomentumEndOperands& o);

// The same as two state_update_references (start = S); the tests' reference.
MomentumEnd momentum_end_reference(const MomentumEndOperands& o);

// Whether momentum_end_update takes its own loop for these operands (for the tests).
bool momentum_end_applies(const MomentumEndOperands& o);

}  // namespace memscope::model
