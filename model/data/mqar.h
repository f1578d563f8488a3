// Multi-query associative recall (MQAR) as Zoology (Arora et al., 2023) defines it: a sequence
// stores key–value pairs, then asks for the values of several of the keys. Token ids are those of
// KeyValueVocab. One sequence, with P = pairs, G = gap, Q = queries:
//
//   position  0  1  2  3 … 2P−2 2P−1 | 2P … 2P+G−1 | 2P+G … 2P+G+Q−1
//   token     k  v  k  v …  k    v   |  G fillers  |  Q query keys
//
// Keys of a sequence are distinct and so are its values (as in Zoology; this needs values >= pairs),
// so each value answers exactly one key. The queries are distinct keys of the pairs in random
// order; the target at a query is that key's value and only queries carry a loss (as in Zoology).
// The first query sits gap+1 positions after the last pair's value, so with gap >= W a sliding
// window attention of width W cannot see any pair from any query: only the memory can answer.
#pragma once
#include "model/data/key_value_vocab.h"
#include "model/data/task.h"

namespace memscope::model {

class MqarTask : public Task {
 public:
  // Checks task.keys, values, pairs, queries and gap; throws UserError naming the bad knob.
  explicit MqarTask(const TaskConfig& config);

  std::string name() const override { return "mqar"; }
  int64_t vocab_size() const override { return vocab_.size(); }
  // 2·pairs + gap + queries; task.seq_len is ignored.
  int64_t seq_len() const override { return 2 * pairs_ + gap_ + queries_; }
  Batch sample(int64_t batch, uint64_t seed) const override;
  std::string token_label(int64_t id) const override { return vocab_.label(id); }

  // The position of the first query, 2·pairs + gap.
  int64_t first_query() const { return 2 * pairs_ + gap_; }

 private:
  KeyValueVocab vocab_;
  int64_t pairs_;
  int64_t queries_;
  int64_t gap_;
};

}  // namespace memscope::model
