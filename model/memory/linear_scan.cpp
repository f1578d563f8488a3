#include "model/memory/linear_scan.h"

#include <ATen/ATen.h>

#include "model/util/cpu_kernels.h"

namespace memscope::model {

at::Tensor running_products(const at::Tensor& x, int64_t dim) {
  const int64_t n = x.size(dim);
  // After the pass with shift k, entry t holds the product of the min(2k, t+1) entries ending at t.
  at::Tensor y = x;
  for (int64_t k = 1; k < n; k *= 2)
    y = at::cat({y.narrow(dim, 0, k), y.narrow(dim, k, n - k) * y.narrow(dim, 0, n - k)}, dim);
  return y;
}

DecayProducts decay_products(const at::Tensor& a) {
  const int64_t n = a.size(-1);
  auto opts = a.options().dtype(at::kBool);
  // The CPU keeps ATen's cumprod and its bits; a GPU's training pass is a CUDA graph (see the header).
  const bool cpu = cpu_kernels_on(a.device());
  auto products = [&](const at::Tensor& x, int64_t dim) {
    return cpu ? at::cumprod(x, dim) : running_products(x, dim);
  };
  // rows t, columns s: factor a_t enters D[·,s] for every t > s.
  at::Tensor strictly_lower = at::ones({n, n}, opts).tril(-1);
  at::Tensor lower = at::ones({n, n}, opts).tril(0);
  auto sizes = a.sizes().vec();
  sizes.push_back(n);
  at::Tensor rows = a.unsqueeze(-1).expand(sizes);
  at::Tensor factors = at::where(strictly_lower, rows, at::ones_like(rows));
  at::Tensor within = at::where(lower, products(factors, -2), at::zeros_like(rows));
  return {within, products(a, -1)};
}

}  // namespace memscope::model
