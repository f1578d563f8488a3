#include "model/memory/feature_map.h"

#include <cmath>

namespace memscope::model {

at::Tensor apply_feature_map(const at::Tensor& x, FeatureMapKind kind, const at::Tensor& poly_coefficients) {
  switch (kind) {
    case FeatureMapKind::Identity:
      return x;
    case FeatureMapKind::Poly: {
      // φ_p(x) = Σ_{i=1..p} a_i x^i (Atlas Eq. 5), Horner form: x·(a_1 + x·(a_2 + …)).
      const int64_t p = poly_coefficients.size(0);
      at::Tensor acc = poly_coefficients[p - 1] * x;
      for (int64_t i = p - 2; i >= 0; --i) acc = (acc + poly_coefficients[i]) * x;
      return acc;
    }
    case FeatureMapKind::Tensor2: {
      // φ(x) = [x, vec(x xᵀ)/√2]
      at::Tensor outer = x.unsqueeze(-1) * x.unsqueeze(-2);
      auto sizes = x.sizes().vec();
      sizes.back() = x.size(-1) * x.size(-1);
      return at::cat({x, outer.reshape(sizes) / std::sqrt(2.0)}, -1);
    }
  }
  return x;
}

}  // namespace memscope::model
