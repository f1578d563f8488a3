// The outer loss and the task accuracy of one batch (SPEC §8 "outer training").
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// Σ cross-entropy over the positions whose target is not kIgnoreIndex, as a 0-dim tensor.
// Summed, not averaged, so truncated-BPTT segments add up to the whole sequence's loss.
at::Tensor summed_cross_entropy(const at::Tensor& logits /*[B,T,V]*/, const at::Tensor& targets /*[B,T]*/);

struct QueryScore {
  int64_t correct = 0;
  int64_t total = 0;

  QueryScore& operator+=(const QueryScore& other) {
    correct += other.correct;
    total += other.total;
    return *this;
  }
  double accuracy() const { return total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0; }
};

// Argmax predictions against targets where `query_mask` is true (accuracy per query).
QueryScore score_queries(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& query_mask);
// The same hits as a 0-dim int64 tensor on the logits' device, without a host transfer.
// Each token's −log p(target) of one row [T,V] against its targets [T], NaN where a token has no
// target (the train view's batch row, issue 19). No gradient.
at::Tensor token_losses(const at::Tensor& logits /*[T,V]*/, const at::Tensor& targets /*[T]*/);

at::Tensor query_hits(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& query_mask);

}  // namespace memscope::model
