// decayed_write.h's loops. Each matrix of the stack is one task: out = w·p + u row by row forward;
// backward, ∂w = g·p in the same pass that sums ∂p = Σ g·w along the scaled side, in one fixed order
// per matrix, so the result does not depend on the thread count.
#include "model/memory/decayed_write.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "model/util/cpu_kernels.h"

namespace memscope::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The stack's shape: `count` matrices of r×c, p one value per row (`rows`) or per column.
struct Stack {
  int64_t count, r, c;
  bool rows;
};

Stack stack_of(const at::Tensor& w, const at::Tensor& p) {
  const int64_t r = w.size(-2), c = w.size(-1);
  return {r * c == 0 ? 0 : w.numel() / (r * c), r, c, p.size(-1) == 1 && p.size(-2) == r};
}

// body(b, i, at) for row i of matrix b, whose elements start at `at`; the matrices in parallel, a
// thread's share worth its start at about 32k elements.
template <typename Body>
void over_rows(const Stack& s, Body body) {
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.r * s.c));
  at::parallel_for(0, s.count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      for (int64_t i = 0; i < s.r; ++i) body(b, i, (b * s.r + i) * s.c);
  });
}

at::Tensor write_loop(const at::Tensor& w_in, const at::Tensor& p_in, const at::Tensor& u_in) {
  const at::Tensor w = w_in.contiguous(), p = p_in.contiguous(), u = u_in.contiguous();
  const Stack s = stack_of(w, p);
  at::Tensor out = at::empty(w.sizes(), w.options());
  const float *wp = w.data_ptr<float>(), *pp = p.data_ptr<float>(), *up = u.data_ptr<float>();
  float* op = out.data_ptr<float>();
  over_rows(s, [&](int64_t b, int64_t i, int64_t at) {
    const float* __restrict wr = wp + at;
    const float* __restrict ur = up + at;
    float* __restrict orow = op + at;
    if (s.rows) {
      const float scale = pp[b * s.r + i];
#pragma GCC ivdep
      for (int64_t j = 0; j < s.c; ++j) orow[j] = wr[j] * scale + ur[j];
    } else {
      const float* __restrict scale = pp + b * s.c;
#pragma GCC ivdep
      for (int64_t j = 0; j < s.c; ++j) orow[j] = wr[j] * scale[j] + ur[j];
    }
  });
  return out;
}

// ∂w = g·p and ∂p = Σ g·w along the scaled side, in one pass over g and w.
std::pair<at::Tensor, at::Tensor> backward_loop(const at::Tensor& g_in, const at::Tensor& w_in,
                                                const at::Tensor& p_in) {
  const at::Tensor g = g_in.contiguous(), w = w_in.contiguous(), p = p_in.contiguous();
  const Stack s = stack_of(w, p);
  at::Tensor d_w = at::empty(w.sizes(), w.options()), d_p = at::zeros(p.sizes(), p.options());
  const float *gp = g.data_ptr<float>(), *wp = w.data_ptr<float>(), *pp = p.data_ptr<float>();
  float *dwp = d_w.data_ptr<float>(), *dpp = d_p.data_ptr<float>();
  over_rows(s, [&](int64_t b, int64_t i, int64_t at) {
    const float* __restrict gr = gp + at;
    const float* __restrict wr = wp + at;
    float* __restrict dwr = dwp + at;
    if (s.rows) {
      const float scale = pp[b * s.r + i];
      float sum = 0;
#pragma GCC ivdep
      for (int64_t j = 0; j < s.c; ++j) {
        dwr[j] = gr[j] * scale;
        sum += gr[j] * wr[j];
      }
      dpp[b * s.r + i] = sum;
    } else {  // rows of one matrix in order: ∂p's sums over i do not depend on the threads
      const float* __restrict scale = pp + b * s.c;
      float* __restrict sums = dpp + b * s.c;
#pragma GCC ivdep
      for (int64_t j = 0; j < s.c; ++j) {
        dwr[j] = gr[j] * scale[j];
        sums[j] += gr[j] * wr[j];
      }
    }
  });
  return {d_w, d_p};
}

struct DecayedWriteFunction : public torch::autograd::Function<DecayedWriteFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& w, const at::Tensor& p,
                            const at::Tensor& u) {
    ctx->save_for_backward({w, p});
    return write_loop(w, p, u);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &w = saved[0], &p = saved[1], &g = grads[0];
    at::Tensor d_w, d_p;
    if (ctx->needs_input_grad(0) || ctx->needs_input_grad(1)) {
      if (at::GradMode::is_enabled()) {  // create_graph: a backward autograd can differentiate
        d_w = g * p;
        d_p = at::sum_to(g * w, p.sizes());
      } else {
        std::tie(d_w, d_p) = backward_loop(g, w, p);
      }
    }
    return {ctx->needs_input_grad(0) ? d_w : at::Tensor(), ctx->needs_input_grad(1) ? d_p : at::Tensor(), g};
  }
};

}  // namespace

bool decayed_write_loop_applies(const at::Tensor& w, const at::Tensor& p, const at::Tensor& u) {
  if (w.dim() < 2 || p.dim() != w.dim() || u.sizes() != w.sizes()) return false;
  for (const at::Tensor* t : {&w, &p, &u})
    if (t->scalar_type() != at::kFloat || t->layout() != at::kStrided || t->device() != w.device())
      return false;
  if (!cpu_kernels_on(w.device())) return false;
  const int64_t d = w.dim();
  if (p.sizes().slice(0, d - 2) != w.sizes().slice(0, d - 2)) return false;  // no broadcast over the stack
  const bool rows = p.size(-2) == w.size(-2) && p.size(-1) == 1;
  const bool columns = p.size(-2) == 1 && p.size(-1) == w.size(-1);
  return rows || columns;
}

at::Tensor decayed_write(const at::Tensor& w, const at::Tensor& p, const at::Tensor& u) {
  if (!decayed_write_loop_applies(w, p, u)) return at::addcmul(u, w, p);
  const bool records =
      at::GradMode::is_enabled() && (w.requires_grad() || p.requires_grad() || u.requires_grad());
  return records ? DecayedWriteFunction::apply(w, p, u) : write_loop(w, p, u);
}

}  // namespace memscope::model
