#include "model/memory/linear_scan.h"

#include <ATen/ATen.h>

namespace memscope::model {

DecayProducts decay_products(const at::Tensor& a) {
  const int64_t n = a.size(-1);
  auto opts = a.options().dtype(at::kBool);
  // rows t, columns s: factor a_t enters D[·,s] for every t > s.
  at::Tensor strictly_lower = at::ones({n, n}, opts).tril(-1);
  at::Tensor lower = at::ones({n, n}, opts).tril(0);
  auto sizes = a.sizes().vec();
  sizes.push_back(n);
  at::Tensor rows = a.unsqueeze(-1).expand(sizes);
  at::Tensor factors = at::where(strictly_lower, rows, at::ones_like(rows));
  at::Tensor within = at::where(lower, at::cumprod(factors, -2), at::zeros_like(rows));
  return {within, at::cumprod(a, -1)};
}

}  // namespace memscope::model
