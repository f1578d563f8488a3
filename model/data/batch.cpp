#include "model/data/batch.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace memscope::model {

Batch empty_batch(int64_t batch, int64_t seq_len) {
  if (batch < 1) throw std::invalid_argument("batch size must be >= 1, got " + std::to_string(batch));
  return Batch{at::zeros({batch, seq_len}, at::kLong), at::full({batch, seq_len}, kIgnoreIndex, at::kLong),
               at::zeros({batch, seq_len}, at::kBool)};
}

}  // namespace memscope::model
