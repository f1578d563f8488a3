#include "model/data/mqar.h"

#include <ATen/ATen.h>

#include "model/data/rng.h"

namespace memscope::model {

MqarTask::MqarTask(const TaskConfig& config)
    : vocab_{config.keys, config.values}, pairs_(config.pairs), queries_(config.queries), gap_(config.gap) {
  check_knob("task.keys", config.keys, 1, kMaxTaskVocab);
  check_knob("task.values", config.values, 1, kMaxTaskVocab);
  check_knob("task.pairs", config.pairs, 1, kMaxTaskVocab);
  check_knob_at_most("task.pairs", config.pairs, "task.keys", config.keys);
  check_knob_at_most("task.pairs", config.pairs, "task.values", config.values);
  check_knob("task.queries", config.queries, 1, kMaxTaskVocab);
  check_knob_at_most("task.queries", config.queries, "task.pairs", config.pairs);
  check_knob("task.gap", config.gap, 0, kMaxTaskSeqLen);
}

Batch MqarTask::sample(int64_t batch, uint64_t seed) const {
  Batch out = empty_batch(batch, seq_len());
  auto tokens = out.tokens.accessor<int64_t, 2>();
  auto targets = out.targets.accessor<int64_t, 2>();
  auto mask = out.query_mask.accessor<bool, 2>();
  for (int64_t b = 0; b < batch; ++b) {
    Rng rng(Rng::mix(seed, static_cast<uint64_t>(b)));
    const auto keys = rng.choose(vocab_.keys, pairs_);
    const auto values = rng.choose(vocab_.values, pairs_);
    for (int64_t i = 0; i < pairs_; ++i) {
      tokens[b][2 * i] = vocab_.key(keys[i]);
      tokens[b][2 * i + 1] = vocab_.value(values[i]);
    }
    // The gap is already filler (empty_batch).
    const auto asked = rng.choose(pairs_, queries_);
    for (int64_t q = 0; q < queries_; ++q) {
      const int64_t t = first_query() + q;
      tokens[b][t] = vocab_.key(keys[asked[q]]);
      targets[b][t] = vocab_.value(values[asked[q]]);
      mask[b][t] = true;
    }
  }
  return out;
}

}  // namespace memscope::model
