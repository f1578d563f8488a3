// Selective copy (Gu & Dao, Mamba, 2023): a few content tokens scattered among filler, then a
// marker, then the model must write the content tokens out in order. Unlike plain copying, the
// positions vary, so the model has to select what to keep by content, not by time.
//
// Token ids: 0 filler "·" · 1 marker "<copy>" · 2 .. values+1: content c0..c(values−1).
// One sequence of T = seq_len tokens, N = copy_tokens, L = T − N:
//
//   positions 0 .. L−2: N content tokens (uniform, repeats allowed) at distinct random positions,
//                       filler elsewhere
//   position  L−1:      the marker
//   positions L .. T−1: filler as input; target at L+i is the i-th content token, query_mask true
//
// The answer positions read blanks rather than the previous content token (teacher forcing):
// with teacher forcing each answer would hand the model the previous one, turning the task partly
// into "what came after c" (associative recall, ambiguous with repeats); with blanks the whole
// ordered list has to come from memory.
#pragma once
#include "model/data/task.h"

namespace memscope::model {

class SelectiveCopyTask : public Task {
 public:
  static constexpr int64_t kFiller = 0;
  static constexpr int64_t kMarker = 1;

  // Checks task.values (the content alphabet), copy_tokens and seq_len (>= 2·copy_tokens + 1).
  explicit SelectiveCopyTask(const TaskConfig& config);

  std::string name() const override { return "copy"; }
  int64_t vocab_size() const override { return 2 + alphabet_; }
  int64_t seq_len() const override { return seq_len_; }
  Batch sample(int64_t batch, uint64_t seed) const override;
  // "·", "<copy>", "c3", "?ID" outside the vocabulary.
  std::string token_label(int64_t id) const override;

  // The position of the marker, seq_len − copy_tokens − 1; the answers follow it.
  int64_t marker_position() const { return seq_len_ - copy_tokens_ - 1; }

 private:
  int64_t alphabet_;
  int64_t copy_tokens_;
  int64_t seq_len_;
};

}  // namespace memscope::model
