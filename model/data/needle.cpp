#include "model/data/needle.h"

#include <ATen/ATen.h>

#include "model/data/rng.h"

namespace memscope::model {

NeedleTask::NeedleTask(const TaskConfig& config)
    : vocab_{config.keys, config.values}, seq_len_(config.seq_len) {
  check_knob("task.keys", config.keys, 2, kMaxTaskVocab);
  check_knob("task.values", config.values, 1, kMaxTaskVocab);
  check_knob("task.seq_len", config.seq_len, 3, kMaxTaskSeqLen);
}

Batch NeedleTask::sample(int64_t batch, uint64_t seed) const {
  Batch out = empty_batch(batch, seq_len_);
  auto tokens = out.tokens.accessor<int64_t, 2>();
  auto targets = out.targets.accessor<int64_t, 2>();
  auto mask = out.query_mask.accessor<bool, 2>();
  const int64_t last = seq_len_ - 1;
  for (int64_t b = 0; b < batch; ++b) {
    Rng rng(Rng::mix(seed, static_cast<uint64_t>(b)));
    const int64_t needle = rng.uniform(vocab_.keys);
    const int64_t value = vocab_.value(rng.uniform(vocab_.values));
    for (int64_t t = 0; t < last; ++t) {
      const int64_t noise = rng.uniform(vocab_.keys - 1);  // a key index, skipping the needle's
      tokens[b][t] = vocab_.key(noise < needle ? noise : noise + 1);
    }
    const int64_t at = rng.uniform(seq_len_ - 2);
    tokens[b][at] = vocab_.key(needle);
    tokens[b][at + 1] = value;
    tokens[b][last] = vocab_.key(needle);
    targets[b][last] = value;
    mask[b][last] = true;
  }
  return out;
}

}  // namespace memscope::model
