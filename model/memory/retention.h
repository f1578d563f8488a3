// Retention projections of SPEC §5 that are not linear in the memory. Both are written as a
// pointwise map P of a latent that itself follows the linear recurrence Z_t = α_t Z_{t−1} − U_t,
// which is what lets the chunkwise form scan them exactly.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// Moneta: M = A / ‖A‖_q^{q−2}, the q-norm over the whole matrix (last two dimensions).
at::Tensor lq_normalize(const at::Tensor& a, double q);

// Memora: M = softmax of each row of the latent L (L = α log M_{t−1} − U up to a per-row constant).
at::Tensor softmax_rows(const at::Tensor& latent);

// The latent whose softmax_rows is m (log m, floored so a zero entry stays finite).
at::Tensor softmax_latent(const at::Tensor& m);

}  // namespace memscope::model
