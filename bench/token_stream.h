// A stream of single tokens to step as the engine steps its probe stream (batch 1, one token at a
// time): the task's sequences one after another, for the benches that time the step itself.
#pragma once
#include <cstdint>
#include <vector>

#include "model/train/trainer.h"

namespace memscope::bench {

struct TokenStream {
  std::vector<at::Tensor> tokens;  // each [1]
  int64_t sequence_length = 0;     // a fresh state every this many tokens
};

inline TokenStream token_stream(model::Trainer& trainer, int64_t count) {
  TokenStream out;
  while (static_cast<int64_t>(out.tokens.size()) < count) {
    const at::Tensor sequence = trainer.training_batch(1).tokens.select(0, 0);
    out.sequence_length = sequence.size(0);
    for (int64_t t = 0; t < out.sequence_length && static_cast<int64_t>(out.tokens.size()) < count; ++t)
      out.tokens.push_back(sequence.narrow(0, t, 1));
  }
  return out;
}

}  // namespace memscope::bench
