// Feature maps φ for keys and queries (SPEC §2, Atlas Eq. 5).
#pragma once
#include <ATen/core/Tensor.h>

#include "model/memory/memory_rule.h"

namespace memscope::model {

// φ over the last dimension of x. `poly_coefficients` holds a_1..a_p (used by `poly` only).
at::Tensor apply_feature_map(const at::Tensor& x, FeatureMapKind kind, const at::Tensor& poly_coefficients);

}  // namespace memscope::model
