#include "model/nn/rms_norm.h"

namespace memscope::model {

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

at::Tensor RmsNormImpl::forward(const at::Tensor& x) const {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps_) * weight;
}

}  // namespace memscope::model
