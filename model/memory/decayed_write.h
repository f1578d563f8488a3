// A memory's decayed write, W ⊙ p + U: dgd's update (SPEC §5, dgd_preconditioner.h), where p scales
// each of W's rows or each of its columns, and U is the write itself.
//
// HOPE's chunkwise form ends every chunk with one such write per weight of its five memories
// (self_modifying_chunkwise.cpp). As ATen's separate multiply and subtract, with their backward's
// negation, product and sum, those weight-sized passes were a tenth of HOPE's training step
// (bench/device_bench --op-times). On the CPU in float32 it is one pass forward, and one backward
// that gives W's and p's gradients together; U's gradient is the incoming one, uncopied. Elsewhere
// it is at::addcmul.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// w [...,r,c]; p [...,r,1] (scales w's rows) or [...,1,c] (its columns), with w's batch dims;
// u [...,r,c]. Returns w ⊙ p + u, differentiable in all three.
at::Tensor decayed_write(const at::Tensor& w, const at::Tensor& p, const at::Tensor& u);

// Whether the CPU's loop takes these operands (for the tests).
bool decayed_write_loop_applies(const at::Tensor& w, const at::Tensor& p, const at::Tensor& u);

}  // namespace memscope::model
