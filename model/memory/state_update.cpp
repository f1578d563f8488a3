#include "model/memory/state_update.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "model/memory/batched_matmul.h"
#include "model/memory/small_gemm.h"
#include "model/util/autocast.h"
#include "model/util/cpu_kernels.h"

namespace memscope::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor matrix_scale(const at::Tensor& scale) { return scale.unsqueeze(-1).unsqueeze(-1); }

// The sizes one stack's loops index: `count` matrices of p×q, written by n rank-1 terms each.
struct Shape {
  int64_t count, p, q, n;
  // a holds one scalar per matrix, so it counts them even where a matrix is empty.
  explicit Shape(const at::Tensor& a, const at::Tensor& m, const at::Tensor& x)
      : count(a.numel()), p(m.size(-2)), q(m.size(-1)), n(x.size(-2)) {}
  int64_t grain() const { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p * q)); }
};

// Σ_e u[e]·v[e] over `count` floats: sixteen independent float sums (each a chain the compiler
// vectorises without reordering), added in double at the end.
double dot(const float* u, const float* v, int64_t count) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  int64_t e = 0;
  for (; e + kLanes <= count; e += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += u[e + l] * v[e + l];
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  for (; e < count; ++e) sum += static_cast<double>(u[e]) * v[e];
  return sum;
}

// out = a·M + c·S, then += xᵀy through small_gemm (C0 = C, beta 1). x is [n,p] row-major, so
// xᵀ(i,t) = x[t·p + i] is small_gemm's A with strides (1, p).
at::Tensor forward_loop(const at::Tensor& a, const at::Tensor& m, const at::Tensor& c, const at::Tensor& s,
                        const at::Tensor& x, const at::Tensor& y) {
  const Shape z(a, m, x);
  at::Tensor out = at::empty_like(m, at::MemoryFormat::Contiguous);
  const float *ap = a.data_ptr<float>(), *mp = m.data_ptr<float>(), *xp = x.data_ptr<float>(),
              *yp = y.data_ptr<float>();
  const float* cp = s.defined() ? c.data_ptr<float>() : nullptr;
  const float* sp = s.defined() ? s.data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  const int64_t pq = z.p * z.q;
  at::parallel_for(0, z.count, z.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      float* C = op + g * pq;
      const float* M = mp + g * pq;
      const float scale = ap[g];
      if (sp) {
        const float* S = sp + g * pq;
        const float other = cp[g];
        for (int64_t e = 0; e < pq; ++e) C[e] = scale * M[e] + other * S[e];
      } else {
        for (int64_t e = 0; e < pq; ++e) C[e] = scale * M[e];
      }
      small_gemm(xp + g * z.n * z.p, 1, static_cast<int>(z.p), yp + g * z.n * z.q, C, C,
                 static_cast<int>(z.p), static_cast<int>(z.n), static_cast<int>(z.q), 1.0f, 1.0f);
    }
  });
  return out;
}

struct StateUpdateFunction : public torch::autograd::Function<StateUpdateFunction> {
  // Every operand contiguous (state_update makes them so). LibTorch 1.13's custom functions take no
  // undefined inputs, so without momentum c and s are stand-ins (a and m), unread, with no gradient.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& m,
                            const at::Tensor& c, const at::Tensor& s, const at::Tensor& x,
                            const at::Tensor& y, bool momentum) {
    ctx->save_for_backward({a, m, c, s, x, y});
    ctx->saved_data["momentum"] = momentum;
    return momentum ? forward_loop(a, m, c, s, x, y) : forward_loop(a, m, {}, {}, x, y);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const variable_list saved = ctx->get_saved_variables();
    const bool momentum = ctx->saved_data["momentum"].toBool();
    const at::Tensor &a = saved[0], &m = saved[1], &x = saved[4], &y = saved[5];
    const at::Tensor c = momentum ? saved[2] : at::Tensor(), s = momentum ? saved[3] : at::Tensor();
    const at::Tensor G = grad_out[0].contiguous();
    if (at::GradMode::is_enabled()) {  // create_graph: the same derivatives as differentiable ATen ops
      const at::Tensor d_a = ctx->needs_input_grad(0) ? (G * m).sum({-2, -1}) : at::Tensor();
      const at::Tensor d_m = ctx->needs_input_grad(1) ? matrix_scale(a) * G : at::Tensor();
      const at::Tensor d_c = momentum && ctx->needs_input_grad(2) ? (G * s).sum({-2, -1}) : at::Tensor();
      const at::Tensor d_s = momentum && ctx->needs_input_grad(3) ? matrix_scale(c) * G : at::Tensor();
      const at::Tensor d_x = ctx->needs_input_grad(4) ? batched_matmul(y, G.transpose(-1, -2)) : at::Tensor();
      const at::Tensor d_y = ctx->needs_input_grad(5) ? batched_matmul(x, G) : at::Tensor();
      return {d_a, d_m, d_c, d_s, d_x, d_y, at::Tensor()};
    }
    const Shape z(a, m, x);
    const int64_t pq = z.p * z.q;
    at::Tensor d_a = at::empty_like(a), d_m = at::empty_like(m), d_x = at::empty_like(x),
               d_y = at::empty_like(y);
    at::Tensor d_c = momentum ? at::empty_like(c) : at::Tensor(),
               d_s = momentum ? at::empty_like(s) : at::Tensor();
    const float *gp = G.data_ptr<float>(), *ap = a.data_ptr<float>(), *mp = m.data_ptr<float>();
    const float *xp = x.data_ptr<float>(), *yp = y.data_ptr<float>();
    const float* cp = momentum ? c.data_ptr<float>() : nullptr;
    const float* sp = momentum ? s.data_ptr<float>() : nullptr;
    float *dap = d_a.data_ptr<float>(), *dmp = d_m.data_ptr<float>(), *dxp = d_x.data_ptr<float>(),
          *dyp = d_y.data_ptr<float>();
    float* dcp = momentum ? d_c.data_ptr<float>() : nullptr;
    float* dsp = momentum ? d_s.data_ptr<float>() : nullptr;
    const int p = static_cast<int>(z.p), q = static_cast<int>(z.q), n = static_cast<int>(z.n);
    // dx [n,p] = y [n,q] · Gᵀ [q,p] needs one operand transposed into a row-major scratch: yᵀ
    // [q,n] (a chunk's rows, smaller than G) as dxᵀ = G yᵀ, where the chunk fills a register's width
    // of columns; else Gᵀ.
    const bool by_y = n >= 16;
    at::parallel_for(0, z.count, z.grain(), [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(static_cast<size_t>(by_y ? z.q * n : pq)),
          dx_t(by_y ? static_cast<size_t>(z.p * n) : 0);
      for (int64_t g = begin; g < end; ++g) {
        const float* Gg = gp + g * pq;
        const float* M = mp + g * pq;
        float* dM = dmp + g * pq;
        const float scale = ap[g];
        dap[g] = static_cast<float>(dot(Gg, M, pq));
        for (int64_t e = 0; e < pq; ++e) dM[e] = scale * Gg[e];
        if (momentum) {
          const float* S = sp + g * pq;
          float* dS = dsp + g * pq;
          const float other = cp[g];
          dcp[g] = static_cast<float>(dot(Gg, S, pq));
          for (int64_t e = 0; e < pq; ++e) dS[e] = other * Gg[e];
        }
        // out = xᵀy:  dy [n,q] = x [n,p] · G [p,q].
        small_gemm(xp + g * n * p, p, 1, Gg, nullptr, dyp + g * n * q, n, p, q, 1.0f, 0.0f);
        const float* yg = yp + g * n * q;
        float* dx = dxp + g * n * p;
        if (by_y) {
          for (int t = 0; t < n; ++t)
            for (int j = 0; j < q; ++j)
              scratch[static_cast<size_t>(j) * n + t] = yg[static_cast<int64_t>(t) * q + j];
          small_gemm(Gg, q, 1, scratch.data(), nullptr, dx_t.data(), p, q, n, 1.0f, 0.0f);
          for (int t = 0; t < n; ++t)
            for (int i = 0; i < p; ++i)
              dx[static_cast<int64_t>(t) * p + i] = dx_t[static_cast<size_t>(i) * n + t];
        } else {
          for (int i = 0; i < p; ++i)
            for (int j = 0; j < q; ++j)
              scratch[static_cast<size_t>(j) * p + i] = Gg[static_cast<int64_t>(i) * q + j];
          small_gemm(yg, q, 1, scratch.data(), nullptr, dx, n, q, p, 1.0f, 0.0f);
        }
      }
    });
    return {d_a, d_m, d_c, d_s, d_x, d_y, at::Tensor()};
  }
};

}  // namespace

at::Tensor state_update_reference(const at::Tensor& a, const at::Tensor& m, const at::Tensor& c,
                                  const at::Tensor& s, const at::Tensor& x, const at::Tensor& y) {
  at::Tensor out = matrix_scale(a) * m + batched_matmul(x.transpose(-1, -2), y);
  return s.defined() ? out + matrix_scale(c) * s : out;
}

bool state_update_applies(const at::Tensor& a, const at::Tensor& m, const at::Tensor& c, const at::Tensor& s,
                          const at::Tensor& x, const at::Tensor& y) {
  if (m.dim() < 3 || x.dim() != m.dim() || y.dim() != m.dim() || a.dim() != m.dim() - 2) return false;
  for (const at::Tensor* t : {&a, &m, &x, &y})
    if (t->scalar_type() != at::kFloat || t->layout() != at::kStrided || t->device() != m.device())
      return false;
  const auto batch = m.sizes().slice(0, m.dim() - 2);
  if (a.sizes() != batch || x.sizes().slice(0, x.dim() - 2) != batch ||
      y.sizes().slice(0, y.dim() - 2) != batch)
    return false;
  if (x.size(-1) != m.size(-2) || y.size(-1) != m.size(-1) || x.size(-2) != y.size(-2)) return false;
  if (s.defined() != c.defined()) return false;
  if (s.defined() && (s.sizes() != m.sizes() || c.sizes() != a.sizes() || s.scalar_type() != at::kFloat ||
                      c.scalar_type() != at::kFloat || s.device() != m.device() || c.device() != m.device()))
    return false;
  // small_gemm indexes in int within one matrix: M's p·q, x's n·p, y's n·q.
  const int64_t p = m.size(-2), q = m.size(-1), n = x.size(-2);
  if (!fits_gemm_index(p * q) || !fits_gemm_index(n * p) || !fits_gemm_index(n * q)) return false;
  return cpu_kernels_on(m.device()) && !autocast_enabled(c10::DeviceType::CPU);
}

at::Tensor state_update(const at::Tensor& a, const at::Tensor& m, const at::Tensor& c, const at::Tensor& s,
                        const at::Tensor& x, const at::Tensor& y) {
  if (!state_update_applies(a, m, c, s, x, y)) return state_update_reference(a, m, c, s, x, y);
  auto dense = [](const at::Tensor& t) { return t.defined() ? t.contiguous() : t; };
  const bool tracked = at::GradMode::is_enabled() &&
                       (a.requires_grad() || m.requires_grad() || (c.defined() && c.requires_grad()) ||
                        (s.defined() && s.requires_grad()) || x.requires_grad() || y.requires_grad());
  if (tracked) {
    const bool momentum = s.defined();
    return StateUpdateFunction::apply(dense(a), dense(m), momentum ? dense(c) : a, momentum ? dense(s) : m,
                                      dense(x), dense(y), momentum);
  }
  return forward_loop(dense(a), dense(m), dense(c), dense(s), dense(x), dense(y));
}

}  // namespace memscope::model
