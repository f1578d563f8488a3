// Needle in a haystack: one key–value pair hidden in a long run of noise, asked for at the end.
// Token ids are those of KeyValueVocab. One sequence of T = seq_len tokens:
//
//   noise … noise  k* v*  noise … noise  k*
//   the pair sits at positions p, p+1 for a uniform p in [0, T−3]; the query k* is at T−1
//
// The noise is keys other than the needle key k*, so the haystack looks like the needle and k*
// occurs exactly twice (planted and asked); the only value token in the sequence is v*. Only the
// last position has a target (v*) and counts for accuracy.
#pragma once
#include "model/data/key_value_vocab.h"
#include "model/data/task.h"

namespace memscope::model {

class NeedleTask : public Task {
 public:
  // Checks task.keys (>= 2: the needle and at least one noise key), values and seq_len (>= 3).
  explicit NeedleTask(const TaskConfig& config);

  std::string name() const override { return "needle"; }
  int64_t vocab_size() const override { return vocab_.size(); }
  int64_t seq_len() const override { return seq_len_; }
  Batch sample(int64_t batch, uint64_t seed) const override;
  std::string token_label(int64_t id) const override { return vocab_.label(id); }

 private:
  KeyValueVocab vocab_;
  int64_t seq_len_;
};

}  // namespace memscope::model
