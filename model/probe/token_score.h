// What a probed inspect frame says of its token's prediction (SPEC §8's frame fields `predicted`
// and `loss`), from the logits of a CPU model, on the host. As four ATen calls (argmax; log_softmax
// in double; index; negate) this was 17 µs of a demo-mqar-titans probe on an AMD VM whose whole
// probe takes about 90 µs (issue 20); as one loop over a vocabulary of 50, under 1 µs.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace memscope::model {

struct TokenScore {
  int64_t predicted = -1;  // the argmax; a NaN logit wins, as at::argmax has it
  double loss = 0;         // −log softmax(logits)[target] in double, rounded to float as the frame's
                           // one float transfer of the probes rounds it; NaN when a logit is NaN or +Inf.
                           // ATen sums in vector lanes with its own exp: the float is the same in every
                           // case tests/model/test_token_score.cpp draws, and could differ in a last bit
};

// `logits`: [V] float on the CPU. `target` < 0: no loss (left 0).
TokenScore score_token(const at::Tensor& logits, int64_t target);

}  // namespace memscope::model
