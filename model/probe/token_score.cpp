#include "model/probe/token_score.h"

#include <ATen/ATen.h>

#include <cmath>

namespace memscope::model {

TokenScore score_token(const at::Tensor& logits, int64_t target) {
  TORCH_CHECK(logits.dim() == 1 && logits.is_cpu() && logits.scalar_type() == at::kFloat,
              "score_token: expected CPU float logits [V], got ", logits.sizes());
  const at::Tensor x = logits.contiguous();
  const float* v = x.data_ptr<float>();
  const int64_t n = x.numel();
  TORCH_CHECK(n > 0, "score_token: no logits");  // as at::argmax
  TokenScore s;
  // The first maximum, or the first NaN (at::argmax's order).
  int64_t best = 0;
  for (int64_t i = 1; i < n && !std::isnan(v[best]); ++i)
    if (std::isnan(v[i]) || v[i] > v[best]) best = i;
  s.predicted = best;
  if (target < 0) return s;
  TORCH_CHECK(target < n, "score_token: target ", target, " beyond a vocabulary of ", n);
  // log softmax as ATen's kernel forms it: x − max − log Σ exp(x − max). A +Inf maximum gives
  // exp(Inf − Inf) = NaN, as there.
  const double top = v[best];
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(v[i]) - top);
  const double loss = -(static_cast<double>(v[target]) - top - std::log(sum));
  s.loss = static_cast<double>(static_cast<float>(loss));
  return s;
}

}  // namespace memscope::model
