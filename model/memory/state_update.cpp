#include "model/memory/state_update.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <utility>
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

// dx [n,p] = y [n,q] · Gᵀ [q,p] for one matrix, with one operand transposed into a thread's
// row-major scratch: yᵀ [q,n] (a chunk's rows, smaller than G) as dxᵀ = G yᵀ, where the chunk fills a
// register's width of columns; else Gᵀ.
class TransposedProduct {
 public:
  explicit TransposedProduct(const Shape& z)
      : p_(static_cast<int>(z.p)),
        q_(static_cast<int>(z.q)),
        n_(static_cast<int>(z.n)),
        by_y_(z.n >= 16),
        scratch_(static_cast<size_t>(by_y_ ? z.q * z.n : z.p * z.q)),
        dx_t_(by_y_ ? static_cast<size_t>(z.p * z.n) : 0) {}

  void transposed_product(const float* y, const float* G, float* dx) {
    const int p = p_, q = q_, n = n_;
    if (by_y_) {
      for (int t = 0; t < n; ++t)
        for (int j = 0; j < q; ++j)
          scratch_[static_cast<size_t>(j) * n + t] = y[static_cast<int64_t>(t) * q + j];
      small_gemm(G, q, 1, scratch_.data(), nullptr, dx_t_.data(), p, q, n, 1.0f, 0.0f);
      for (int t = 0; t < n; ++t)
        for (int i = 0; i < p; ++i)
          dx[static_cast<int64_t>(t) * p + i] = dx_t_[static_cast<size_t>(i) * n + t];
    } else {
      for (int i = 0; i < p; ++i)
        for (int j = 0; j < q; ++j)
          scratch_[static_cast<size_t>(j) * p + i] = G[static_cast<int64_t>(i) * q + j];
      small_gemm(y, q, 1, scratch_.data(), nullptr, dx, n, q, p, 1.0f, 0.0f);
    }
  }

 private:
  int p_, q_, n_;
  bool by_y_;
  std::vector<float> scratch_, dx_t_;
};

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
    at::parallel_for(0, z.count, z.grain(), [&](int64_t begin, int64_t end) {
      TransposedProduct scratch(z);
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
        // out = xᵀy:  dy [n,q] = x [n,p] · G [p,q], and dx = y Gᵀ.
        small_gemm(xp + g * n * p, p, 1, Gg, nullptr, dyp + g * n * q, n, p, q, 1.0f, 0.0f);
        scratch.transposed_product(yp + g * n * q, Gg, dxp + g * n * p);
      }
    });
    return {d_a, d_m, d_c, d_s, d_x, d_y, at::Tensor()};
  }
};

// out[e] = Σ_i scale[i]·term[i][e] over `count` floats, for one to three terms, summed in order.
void scaled_sum(float* __restrict out, const float* const* term, const float* scale, int terms,
                int64_t count) {
  const float* __restrict t0 = term[0];
  const float s0 = scale[0];
  if (terms == 1) {
    for (int64_t e = 0; e < count; ++e) out[e] = s0 * t0[e];
    return;
  }
  const float* __restrict t1 = term[1];
  const float s1 = scale[1];
  if (terms == 2) {
    for (int64_t e = 0; e < count; ++e) out[e] = s0 * t0[e] + s1 * t1[e];
    return;
  }
  const float* __restrict t2 = term[2];
  const float s2 = scale[2];
  for (int64_t e = 0; e < count; ++e) out[e] = s0 * t0[e] + s1 * t1[e] + s2 * t2[e];
}

// memory = a·M + c·S + xᵀy and momentum = b·S + uᵀy: state_update's loop for each (the saving
// is the backward's; forward, S is read twice).
std::pair<at::Tensor, at::Tensor> momentum_end_loop(const MomentumEndOperands& o) {
  return {forward_loop(o.a, o.m, o.c, o.s, o.x, o.y), forward_loop(o.b, o.s, {}, {}, o.u, o.y)};
}

// The three gradients S's uses send back, for momentum_end_update's backward: those of the memory,
// the momentum and the start view, any of them undefined where that output reached no loss.
struct EndGradients {
  at::Tensor memory, momentum, start;
};

// The derivatives as ATen ops, for a backward taken with create_graph.
variable_list momentum_end_aten_backward(const MomentumEndOperands& o, const EndGradients& G) {
  variable_list d(8);
  if (G.memory.defined()) {
    d[0] = (G.memory * o.m).sum({-2, -1});
    d[1] = matrix_scale(o.a) * G.memory;
    d[2] = (G.memory * o.s).sum({-2, -1});
    d[4] = batched_matmul(o.y, G.memory.transpose(-1, -2));
  }
  if (G.momentum.defined()) {
    d[5] = (G.momentum * o.s).sum({-2, -1});
    d[6] = batched_matmul(o.y, G.momentum.transpose(-1, -2));
  }
  for (const at::Tensor& term :
       {G.memory.defined() ? matrix_scale(o.c) * G.memory : at::Tensor(),
        G.momentum.defined() ? matrix_scale(o.b) * G.momentum : at::Tensor(), G.start})
    if (term.defined()) d[3] = d[3].defined() ? d[3] + term : term;
  if (G.memory.defined()) d[7] = batched_matmul(o.x, G.memory);
  if (G.momentum.defined()) {
    const at::Tensor from_u = batched_matmul(o.u, G.momentum);
    d[7] = d[7].defined() ? d[7] + from_u : from_u;
  }
  return d;
}

// The same derivatives one matrix at a time: S's three gradients c·G_memory + b·G_momentum + G_start
// in one pass, dy = x G_memory + u G_momentum accumulated in place.
variable_list momentum_end_loop_backward(const MomentumEndOperands& o, const EndGradients& G) {
  const bool has_w = G.memory.defined(), has_n = G.momentum.defined();
  variable_list d(8);
  if (!has_w && !has_n) {  // only the reads used S: its gradient is theirs, uncopied
    d[3] = G.start;
    return d;
  }
  const Shape z(o.a, o.m, o.x);
  const int64_t pq = z.p * z.q;
  const int p = static_cast<int>(z.p), q = static_cast<int>(z.q), n = static_cast<int>(z.n);
  const at::Tensor gw = has_w ? G.memory.contiguous() : at::Tensor(),
                   gn = has_n ? G.momentum.contiguous() : at::Tensor(),
                   gr = G.start.defined() ? G.start.contiguous() : at::Tensor();
  d[3] = at::empty_like(o.s);
  d[7] = at::empty_like(o.y);
  if (has_w) {
    d[0] = at::empty_like(o.a);
    d[1] = at::empty_like(o.m);
    d[2] = at::empty_like(o.c);
    d[4] = at::empty_like(o.x);
  }
  if (has_n) {
    d[5] = at::empty_like(o.b);
    d[6] = at::empty_like(o.u);
  }
  auto ptr = [](const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
  const float *gwp = ptr(gw), *gnp = ptr(gn), *grp = ptr(gr);
  const float *ap = o.a.data_ptr<float>(), *mp = o.m.data_ptr<float>(), *cp = o.c.data_ptr<float>(),
              *sp = o.s.data_ptr<float>(), *xp = o.x.data_ptr<float>(), *bp = o.b.data_ptr<float>(),
              *up = o.u.data_ptr<float>(), *yp = o.y.data_ptr<float>();
  float *dap = ptr(d[0]), *dmp = ptr(d[1]), *dcp = ptr(d[2]), *dsp = ptr(d[3]), *dxp = ptr(d[4]),
        *dbp = ptr(d[5]), *dup = ptr(d[6]), *dyp = ptr(d[7]);
  at::parallel_for(0, z.count, z.grain(), [&](int64_t begin, int64_t end) {
    TransposedProduct scratch(z);
    for (int64_t g = begin; g < end; ++g) {
      const float* M = mp + g * pq;
      const float* S = sp + g * pq;
      // The flags, not the pointers, say which gradients came: an empty matrix's data may be null.
      const float* GW = has_w ? gwp + g * pq : nullptr;
      const float* GN = has_n ? gnp + g * pq : nullptr;
      const float* terms[3] = {};
      float scales[3] = {};
      int count = 0;
      if (has_w) {
        dap[g] = static_cast<float>(dot(GW, M, pq));
        dcp[g] = static_cast<float>(dot(GW, S, pq));
        scaled_sum(dmp + g * pq, &GW, ap + g, 1, pq);
        terms[count] = GW;
        scales[count++] = cp[g];
      }
      if (has_n) {
        dbp[g] = static_cast<float>(dot(GN, S, pq));
        terms[count] = GN;
        scales[count++] = bp[g];
      }
      if (grp) {
        terms[count] = grp + g * pq;
        scales[count++] = 1.0f;
      }
      scaled_sum(dsp + g * pq, terms, scales, count, pq);
      // memory = xᵀy + …: dy = x G_W and dx = y G_Wᵀ; momentum = uᵀy + …: dy += u G_N, du = y G_Nᵀ.
      float* dy = dyp + g * n * q;
      const float* yg = yp + g * n * q;
      if (has_w) {
        small_gemm(xp + g * n * p, p, 1, GW, nullptr, dy, n, p, q, 1.0f, 0.0f);
        scratch.transposed_product(yg, GW, dxp + g * n * p);
      }
      if (has_n) {
        small_gemm(up + g * n * p, p, 1, GN, dy, dy, n, p, q, 1.0f, has_w ? 1.0f : 0.0f);
        scratch.transposed_product(yg, GN, dup + g * n * p);
      }
    }
  });
  return d;
}

struct MomentumEndFunction : public torch::autograd::Function<MomentumEndFunction> {
  // Every operand contiguous (momentum_end_update makes them so).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& m,
                               const at::Tensor& c, const at::Tensor& s, const at::Tensor& x,
                               const at::Tensor& b, const at::Tensor& u, const at::Tensor& y) {
    ctx->set_materialize_grads(false);  // an output no loss reached costs its backward nothing
    ctx->save_for_backward({a, m, c, s, x, b, u, y});
    const auto [memory, momentum] = momentum_end_loop({a, m, c, s, x, b, u, y});
    return {memory, momentum, s.narrow(-2, 0, s.size(-2))};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list v = ctx->get_saved_variables();
    const MomentumEndOperands o{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    const EndGradients G{grads[0], grads[1], grads[2]};
    return at::GradMode::is_enabled() ? momentum_end_aten_backward(o, G) : momentum_end_loop_backward(o, G);
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

MomentumEnd momentum_end_reference(const MomentumEndOperands& o) {
  return {state_update_reference(o.a, o.m, o.c, o.s, o.x, o.y),
          state_update_reference(o.b, o.s, {}, {}, o.u, o.y), o.s};
}

bool momentum_end_applies(const MomentumEndOperands& o) {
  return o.c.defined() && o.s.defined() && state_update_applies(o.a, o.m, o.c, o.s, o.x, o.y) &&
         state_update_applies(o.b, o.s, {}, {}, o.u, o.y);
}

MomentumEnd momentum_end_update(const MomentumEndOperands& o) {
  if (!momentum_end_applies(o)) return momentum_end_reference(o);
  const MomentumEndOperands dense{o.a.contiguous(), o.m.contiguous(), o.c.contiguous(), o.s.contiguous(),
                                  o.x.contiguous(), o.b.contiguous(), o.u.contiguous(), o.y.contiguous()};
  bool tracked = false;
  for (const at::Tensor* t : {&o.a, &o.m, &o.c, &o.s, &o.x, &o.b, &o.u, &o.y}) tracked |= t->requires_grad();
  if (at::GradMode::is_enabled() && tracked) {
    const variable_list out =
        MomentumEndFunction::apply(dense.a, dense.m, dense.c, dense.s, dense.x, dense.b, dense.u, dense.y);
    // An S₀ that needs no gradient (the first chunk's zeros) is read plainly: through the view,
    // the reads' gradient for it would be computed and dropped.
    return {out[0], out[1], o.s.requires_grad() ? out[2] : o.s};
  }
  const auto [memory, momentum] = momentum_end_loop(dense);
  return {memory, momentum, o.s};
}

}  // namespace memscope::model
