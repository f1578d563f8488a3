// weight_views.h's function. Its backward sums the views' gradients row by row: a row of the weight
// (one index before `dim` and one along it) gets the first covering gradient's row copied, then each
// later one's added, always in the views' order, so the sum does not depend on the thread count.
#include "model/memory/weight_views.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstring>

#include "model/util/cpu_kernels.h"

namespace memscope::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The ranges with every length resolved (−1: to the end), checked against w's size along dim.
std::vector<WeightRange> resolved(const at::Tensor& w, int64_t dim, const std::vector<WeightRange>& ranges) {
  std::vector<WeightRange> spans;
  const int64_t size = w.size(dim);
  for (const WeightRange& r : ranges) {
    TORCH_CHECK(r.length >= -1, "weight_views: a range's length is -1 (to the end) or at least 0, got ",
                r.length);
    const int64_t length = r.length == -1 ? size - r.start : r.length;
    TORCH_CHECK(r.start >= 0 && length >= 0 && r.start + length <= size, "weight_views: range [", r.start,
                ", ", r.start + length, ") is outside dim ", dim, " of size ", size);
    spans.push_back({r.start, length});
  }
  return spans;
}

// Σ of the defined gradients, each placed at its span along `dim` of `sizes`, without autograd.
at::Tensor sum_loop(const variable_list& grads, const std::vector<WeightRange>& spans, at::IntArrayRef sizes,
                    int64_t dim, const at::TensorOptions& options) {
  at::Tensor out = at::empty(sizes, options);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= sizes[i];
  for (int64_t i = dim + 1; i < static_cast<int64_t>(sizes.size()); ++i) inner *= sizes[i];
  const int64_t along = sizes[dim];
  std::vector<at::Tensor> contiguous(grads.size());
  std::vector<const float*> source(grads.size(), nullptr);
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i].defined()) {
      contiguous[i] = grads[i].contiguous();
      source[i] = contiguous[i].data_ptr<float>();
    }
  float* op = out.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, inner));
  at::parallel_for(0, outer * along, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t o = row / along, d = row % along;
      float* __restrict target = op + row * inner;
      bool first = true;
      for (size_t i = 0; i < spans.size(); ++i) {
        if (source[i] == nullptr || d < spans[i].start || d >= spans[i].start + spans[i].length) continue;
        const float* __restrict from = source[i] + (o * spans[i].length + d - spans[i].start) * inner;
        if (first) {
          std::memcpy(target, from, static_cast<size_t>(inner) * sizeof(float));
        } else {
#pragma GCC ivdep
          for (int64_t j = 0; j < inner; ++j) target[j] += from[j];
        }
        first = false;
      }
      if (first) std::memset(target, 0, static_cast<size_t>(inner) * sizeof(float));
    }
  });
  return out;
}

struct WeightViewsFunction : public torch::autograd::Function<WeightViewsFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& w, int64_t dim,
                               const std::vector<int64_t>& starts, const std::vector<int64_t>& lengths) {
    ctx->set_materialize_grads(false);  // an unused view's gradient stays undefined, and costs nothing
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["sizes"] = w.sizes().vec();
    ctx->saved_data["starts"] = starts;
    ctx->saved_data["lengths"] = lengths;
    variable_list views;
    for (size_t i = 0; i < starts.size(); ++i) views.push_back(w.narrow(dim, starts[i], lengths[i]));
    return views;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const std::vector<int64_t> starts = ctx->saved_data["starts"].toIntVector(),
                               lengths = ctx->saved_data["lengths"].toIntVector();
    std::vector<WeightRange> spans;
    at::Tensor any;
    for (size_t i = 0; i < grads.size(); ++i) {
      spans.push_back({starts[i], lengths[i]});
      if (grads[i].defined()) any = grads[i];
    }
    if (!any.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    at::Tensor sum;
    if (at::GradMode::is_enabled()) {  // create_graph: a sum autograd can differentiate
      for (size_t i = 0; i < grads.size(); ++i) {
        if (!grads[i].defined()) continue;
        const at::Tensor placed =
            at::slice_backward(grads[i], sizes, dim, starts[i], starts[i] + lengths[i], 1);
        sum = sum.defined() ? sum + placed : placed;
      }
    } else {
      sum = sum_loop(grads, spans, sizes, dim, any.options());
    }
    return {sum, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool weight_views_loop_applies(const at::Tensor& w) { return cpu_kernel_float(w); }

std::vector<at::Tensor> weight_views(const at::Tensor& w, int64_t dim_in,
                                     const std::vector<WeightRange>& ranges) {
  const int64_t dim = dim_in < 0 ? dim_in + w.dim() : dim_in;
  TORCH_CHECK(dim >= 0 && dim < w.dim(), "weight_views: dim ", dim_in, " is outside a ", w.dim(),
              "-d weight");
  const std::vector<WeightRange> spans = resolved(w, dim, ranges);
  if (!weight_views_loop_applies(w) || !at::GradMode::is_enabled() || !w.requires_grad()) {
    // Autograd's own sums. A whole range is the weight itself: a narrow's backward would fill a
    // weight-sized gradient with zeros first.
    std::vector<at::Tensor> views;
    for (const WeightRange& s : spans)
      views.push_back(s.start == 0 && s.length == w.size(dim) ? w : w.narrow(dim, s.start, s.length));
    return views;
  }
  std::vector<int64_t> starts, lengths;
  for (const WeightRange& s : spans) {
    starts.push_back(s.start);
    lengths.push_back(s.length);
  }
  return WeightViewsFunction::apply(w, dim, starts, lengths);
}

}  // namespace memscope::model
