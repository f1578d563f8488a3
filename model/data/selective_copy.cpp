#include "model/data/selective_copy.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "model/data/rng.h"

namespace memscope::model {

SelectiveCopyTask::SelectiveCopyTask(const TaskConfig& config)
    : alphabet_(config.values), copy_tokens_(config.copy_tokens), seq_len_(config.seq_len) {
  check_knob("task.values", config.values, 1, kMaxTaskVocab);
  check_knob("task.copy_tokens", config.copy_tokens, 1, (kMaxTaskSeqLen - 1) / 2);
  // The content needs copy_tokens distinct slots before the marker, and as many answers after it.
  check_knob("task.seq_len", config.seq_len, 2 * config.copy_tokens + 1, kMaxTaskSeqLen);
}

Batch SelectiveCopyTask::sample(int64_t batch, uint64_t seed) const {
  Batch out = empty_batch(batch, seq_len_);
  auto tokens = out.tokens.accessor<int64_t, 2>();
  auto targets = out.targets.accessor<int64_t, 2>();
  auto mask = out.query_mask.accessor<bool, 2>();
  const int64_t marker = marker_position();
  for (int64_t b = 0; b < batch; ++b) {
    Rng rng(Rng::mix(seed, static_cast<uint64_t>(b)));
    auto slots = rng.choose(marker, copy_tokens_);
    std::sort(slots.begin(), slots.end());
    for (int64_t i = 0; i < copy_tokens_; ++i) {
      const int64_t content = 2 + rng.uniform(alphabet_);
      tokens[b][slots[i]] = content;
      targets[b][marker + 1 + i] = content;
      mask[b][marker + 1 + i] = true;
    }
    tokens[b][marker] = kMarker;
  }
  return out;
}

std::string SelectiveCopyTask::token_label(int64_t id) const {
  if (id == kFiller) return "·";
  if (id == kMarker) return "<copy>";
  if (id >= 2 && id < vocab_size()) return "c" + std::to_string(id - 2);
  return "?" + std::to_string(id);
}

}  // namespace memscope::model
