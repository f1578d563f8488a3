// Rotary position embedding (RoFormer): rotates pairs (x_i, x_{i+d/2}) of each head by
// position · base^{−2i/d}. Positions count from the start of the stream, so a token gets the same
// rotation whether it arrives in a batch or alone in step mode.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// x: [B,H,T,d] with d even; positions: [T] int64.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& positions, double base);

}  // namespace memscope::model
