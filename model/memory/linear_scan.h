// The first-order linear recurrence Z_t = a_t Z_{t−1} + u_t inside one chunk, in closed form
// (SPEC §9: momentum and retention are a scan): Z_t = P_t Z_0 + Σ_{s≤t} D[t,s] u_s.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

struct DecayProducts {
  at::Tensor within;      // [..., n, n]: D[t,s] = Π_{s<j≤t} a_j for s ≤ t, 0 above the diagonal
  at::Tensor from_start;  // [..., n]:    P_t = Π_{j≤t} a_j
};

// Products are taken directly, not as exp of log-sums, so a_j = 0 is exact: by at::cumprod where
// the CPU's own kernels run (cpu_kernels.h), by running_products elsewhere.
DecayProducts decay_products(const at::Tensor& a);

// Π_{j≤t} x_j along `dim`, as at::cumprod, by doubling: ⌈log₂ n⌉ products of shifted copies. Its
// backward is those products' and reads nothing back. at::cumprod's asks the host whether any input
// is zero, a read of the device that a CUDA graph cannot capture (host_reads.h), so the training
// pass's graph takes this form. The products group differently, so a float32 result may differ
// from cumprod's in its last bits.
at::Tensor running_products(const at::Tensor& x, int64_t dim);

}  // namespace memscope::model
