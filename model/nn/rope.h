// Rotary position embedding (RoFormer): rotates pairs (x_i, x_{i+d/2}) of each head by
// position · base^{−2i/d}. Positions count from the start of the stream, so a token gets the same
// rotation whether it arrives in a batch or alone in step mode.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// The rotation for positions [T] int64 and head dimension d, in x's dtype: cos and sin [T, d/2].
// Computed once per call site and shared by q and k (attention rotates both by the same angles).
struct RopeAngles {
  at::Tensor cos, sin;
};
RopeAngles rope_angles(const at::Tensor& positions, int64_t d, double base, at::ScalarType dtype);

// x: [B,H,T,d] with d even, rotated by `angles` (of x's T positions).
at::Tensor apply_rope(const at::Tensor& x, const RopeAngles& angles);

// x: [B,H,T,d] with d even; positions: [T] int64.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& positions, double base);

}  // namespace memscope::model
