// Views of one weight whose gradients autograd adds in one pass.
//
// Autograd adds the gradients of a tensor's uses two at a time, each a pass over the whole weight,
// and the backward of a narrow or select first fills a weight-sized tensor with zeros. HOPE's
// chunkwise form reads each stacked weight of its five memories five times in a chunk (the
// projections, the pass at the key, the inner gradient, the main memory's read and the decayed
// write), so those adds and fills were a tenth of its training step (bench/device_bench
// --op-times). Taking each use through its own view from weight_views, the gradients reach one
// autograd function that writes their sum, each range of the weight from the gradients that
// cover it, in one pass: on the CPU in float32 as a loop; elsewhere the views are plain narrows.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace memscope::model {

struct WeightRange {
  int64_t start = 0, length = -1;  // along the views' dim; length −1: to the end
};

// One view w.narrow(dim, r.start, r.length) per range, differentiable, their gradients summed in one
// pass. Give each use its own view: two uses of one view are added by autograd again. The views are
// outputs of a custom autograd function, so autograd refuses an in-place change to them (or to
// views of them); read them only. Where the loop does not apply they are plain narrows, and a whole
// range is w itself.
std::vector<at::Tensor> weight_views(const at::Tensor& w, int64_t dim,
                                     const std::vector<WeightRange>& ranges);

// n whole ranges: a weight's n uses.
inline std::vector<WeightRange> whole(size_t n) { return std::vector<WeightRange>(n); }

// Whether the CPU's loop sums these views' gradients (for the tests).
bool weight_views_loop_applies(const at::Tensor& w);

}  // namespace memscope::model
