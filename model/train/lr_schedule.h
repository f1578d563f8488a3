// The outer learning rate: linear warmup to the peak, then a cosine down to min_lr · peak.
#pragma once
#include <algorithm>
#include <cmath>

#include "model/train/train_config.h"

namespace memscope::model {

inline double learning_rate_at(const TrainConfig& c, int64_t step) {
  if (c.warmup > 0 && step < c.warmup) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup);
  const int64_t decay_steps = std::max<int64_t>(1, c.steps - c.warmup);
  const double progress = std::clamp(static_cast<double>(step - c.warmup) / static_cast<double>(decay_steps), 0.0, 1.0);
  const double floor = c.min_lr * c.lr;
  return floor + (c.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace memscope::model
