#include "model/train/task_loss.h"

#include <torch/torch.h>

#include <limits>

#include "model/data/batch.h"

namespace memscope::model {

at::Tensor summed_cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  const at::Tensor flat_logits = logits.reshape({-1, logits.size(-1)});
  const at::Tensor flat_targets = targets.reshape({-1});
  return at::nll_loss(at::log_softmax(flat_logits, -1), flat_targets, {}, at::Reduction::Sum, kIgnoreIndex);
}

at::Tensor token_losses(const at::Tensor& logits, const at::Tensor& targets) {
  at::NoGradGuard no_grad;
  const at::Tensor scored = targets != kIgnoreIndex;
  const at::Tensor safe = at::where(scored, targets, at::zeros_like(targets));
  const at::Tensor loss = -at::log_softmax(logits.to(at::kDouble), -1).gather(-1, safe.unsqueeze(-1)).squeeze(-1);
  return at::where(scored, loss, at::full_like(loss, std::numeric_limits<double>::quiet_NaN()));
}

at::Tensor query_hits(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& query_mask) {
  at::NoGradGuard no_grad;
  return ((logits.argmax(-1) == targets) & query_mask).sum();
}

QueryScore score_queries(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& query_mask) {
  return {query_hits(logits, targets, query_mask).item<int64_t>(), query_mask.sum().item<int64_t>()};
}

}  // namespace memscope::model
