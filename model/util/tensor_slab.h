// Many small tensors carved from one allocation, for the per-token records of the fused steps.
// A probed Titans step allocated fourteen [B,H,…] tensors per layer, each through the dispatcher
// and the allocator: 14 µs a layer on the AMD VM of README "The record of a probed step", a tenth
// of the step. A slab is one at::empty; each piece is a contiguous view of it, made without the
// dispatcher. The pieces share the slab's storage and keep it alive (a frame that kept one piece
// would keep the whole slab: a record's are a few KB to a few hundred KB).
//
// For tensors outside autograd only (the fused steps run with grad mode off): a piece carries no
// autograd view metadata, and writing one in place bumps no version counter its siblings share.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace memscope::model {

class TensorSlab {
 public:
  // Room for `elements` elements of `options`' dtype and device, uninitialised.
  TensorSlab(int64_t elements, const at::TensorOptions& options);

  // The next numel(sizes) elements as a contiguous tensor of these sizes. Throws when the slab
  // has too few left.
  at::Tensor take(at::IntArrayRef sizes);

 private:
  at::Tensor slab_;  // 1-D
  int64_t used_ = 0;
};

}  // namespace memscope::model
