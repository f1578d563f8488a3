#include "model/nn/swiglu.h"

#include <cmath>

namespace memscope::model {

SwiGluImpl::SwiGluImpl(int64_t dim, int64_t hidden) {
  const double in = 1.0 / std::sqrt(static_cast<double>(dim));
  const double out = 1.0 / std::sqrt(static_cast<double>(hidden));
  w_gate = register_parameter("w_gate", torch::randn({hidden, dim}) * in);
  w_up = register_parameter("w_up", torch::randn({hidden, dim}) * in);
  w_down = register_parameter("w_down", torch::randn({dim, hidden}) * out);
}

at::Tensor SwiGluImpl::forward(const at::Tensor& x) const {
  return at::matmul(at::silu(at::matmul(x, w_gate.t())) * at::matmul(x, w_up.t()), w_down.t());
}

}  // namespace memscope::model
