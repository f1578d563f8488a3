// The first-order linear recurrence Z_t = a_t Z_{t−1} + u_t inside one chunk, in closed form
// (SPEC §9: momentum and retention are a scan): Z_t = P_t Z_0 + Σ_{s≤t} D[t,s] u_s.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

struct DecayProducts {
  at::Tensor within;      // [..., n, n]: D[t,s] = Π_{s<j≤t} a_j for s ≤ t, 0 above the diagonal
  at::Tensor from_start;  // [..., n]:    P_t = Π_{j≤t} a_j
};

// Products are taken directly (cumprod), not as exp of log-sums, so a_j = 0 is exact.
DecayProducts decay_products(const at::Tensor& a);

}  // namespace memscope::model
