#include "model/memory/decayed_contractions.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <vector>

#include "model/util/cpu_kernels.h"

namespace memscope::model {

namespace {

// `#pragma GCC ivdep` marks the loops that store into one buffer while reading others, which never
// overlap: this file is built without the vectoriser's run-time overlap checks (model/CMakeLists.txt),
// so an unmarked one would stay scalar.

// One head's view of the inputs: row-major [n, d], [n, c, d] and [n, n·c] blocks.
template <typename T>
struct Head {
  const T* keep;
  const T* lr;
  int64_t n, c, d;
};

// Calls visit(row, r, running) for every causal pair, with running[f] = D[t,r,f] and row the output
// row that reads it (t, or t + 1 when the read comes before the write). r outer, t inner, so that
// D[t,r,·] is the previous pair's times p_t: one multiply per feature and pair.
template <typename T, typename Visit>
void for_each_decay(const Head<T>& h, bool before_write, std::vector<T>& running, Visit visit) {
  const int64_t shift = before_write ? 1 : 0;
  for (int64_t r = 0; r < h.n; ++r) {
    std::fill(running.begin(), running.end(), T(1));
    for (int64_t t = r; t + shift < h.n; ++t) {
      if (t > r) {
        const T* p = h.keep + t * h.d;
#pragma GCC ivdep
        for (int64_t f = 0; f < h.d; ++f) running[static_cast<size_t>(f)] *= p[f];
      }
      visit(t + shift, r, running.data());
    }
  }
}

template <typename T>
void key_query_head(const Head<T>& h, const T* q, const T* phi, T* out, bool before_write) {
  const int64_t n = h.n, c = h.c, d = h.d;
  std::vector<T> running(static_cast<size_t>(d)), scaled(static_cast<size_t>(c * d)), rq(static_cast<size_t>(d));
  int64_t scaled_for = -1;
  for_each_decay(h, before_write, running, [&](int64_t row, int64_t r, const T* D) {
    if (scaled_for != r) {  // lr[r,f] φ[r,j,f], once per r
      for (int64_t j = 0; j < c; ++j)
#pragma GCC ivdep
        for (int64_t f = 0; f < d; ++f) scaled[static_cast<size_t>(j * d + f)] = h.lr[r * d + f] * phi[(r * c + j) * d + f];
      scaled_for = r;
    }
    const T* q_row = q + row * d;
#pragma GCC ivdep
    for (int64_t f = 0; f < d; ++f) rq[static_cast<size_t>(f)] = D[f] * q_row[f];
    T* o = out + row * n * c + r * c;
    for (int64_t j = 0; j < c; ++j) {
      const T* s = scaled.data() + j * d;
      T sum = 0;
      for (int64_t f = 0; f < d; ++f) sum += rq[static_cast<size_t>(f)] * s[f];
      o[j] = sum;
    }
  });
}

template <typename T>
void mixed_read_head(const Head<T>& h, const T* gram, const T* d_o, T* out, bool before_write) {
  const int64_t n = h.n, c = h.c, d = h.d;
  std::vector<T> running(static_cast<size_t>(d)), w(static_cast<size_t>(d));
  for_each_decay(h, before_write, running, [&](int64_t row, int64_t r, const T* D) {
    const T* lr = h.lr + r * d;
#pragma GCC ivdep
    for (int64_t f = 0; f < d; ++f) w[static_cast<size_t>(f)] = D[f] * lr[f];
    const T* g = gram + row * n * c + r * c;
    T* o = out + row * d;
    for (int64_t j = 0; j < c; ++j) {
      const T* delta = d_o + (r * c + j) * d;
      const T gj = g[j];
#pragma GCC ivdep
      for (int64_t f = 0; f < d; ++f) o[f] += w[static_cast<size_t>(f)] * gj * delta[f];
    }
  });
}

}  // namespace

bool decayed_contractions_apply(const at::Tensor& like) {
  return cpu_kernels_on(like.device()) &&
         (like.scalar_type() == at::kFloat || like.scalar_type() == at::kDouble) &&
         !at::GradMode::is_enabled();
}

at::Tensor decayed_key_query(const at::Tensor& keep_in, const at::Tensor& q_in, const at::Tensor& lr_in,
                             const at::Tensor& phi_in, bool before_write) {
  const at::Tensor keep = keep_in.contiguous(), q = q_in.contiguous(), lr = lr_in.contiguous(), phi = phi_in.contiguous();
  const int64_t heads = keep.size(0) * keep.size(1), n = keep.size(2), d = keep.size(3), c = phi.size(3);
  at::Tensor out = at::zeros({keep.size(0), keep.size(1), n, n * c}, keep.options());
  AT_DISPATCH_FLOATING_TYPES(keep.scalar_type(), "decayed_key_query", [&] {
    at::parallel_for(0, heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const Head<scalar_t> h{keep.data_ptr<scalar_t>() + i * n * d, lr.data_ptr<scalar_t>() + i * n * d, n, c, d};
        key_query_head(h, q.data_ptr<scalar_t>() + i * n * d, phi.data_ptr<scalar_t>() + i * n * c * d,
                       out.data_ptr<scalar_t>() + i * n * n * c, before_write);
      }
    });
  });
  return out;
}

at::Tensor decayed_mixed_read(const at::Tensor& keep_in, const at::Tensor& lr_in, const at::Tensor& gram_in,
                              const at::Tensor& d_o_in, bool before_write) {
  const at::Tensor keep = keep_in.contiguous(), lr = lr_in.contiguous(), gram = gram_in.contiguous(), d_o = d_o_in.contiguous();
  const int64_t heads = keep.size(0) * keep.size(1), n = keep.size(2), d = keep.size(3), c = d_o.size(3);
  at::Tensor out = at::zeros_like(keep);
  AT_DISPATCH_FLOATING_TYPES(keep.scalar_type(), "decayed_mixed_read", [&] {
    at::parallel_for(0, heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const Head<scalar_t> h{keep.data_ptr<scalar_t>() + i * n * d, lr.data_ptr<scalar_t>() + i * n * d, n, c, d};
        mixed_read_head(h, gram.data_ptr<scalar_t>() + i * n * n * c, d_o.data_ptr<scalar_t>() + i * n * c * d,
                        out.data_ptr<scalar_t>() + i * n * d, before_write);
      }
    });
  });
  return out;
}

}  // namespace memscope::model
