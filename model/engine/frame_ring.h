// FrameRing: the frames of one timeline, newest last, bounded by a memory budget
// (engine.frame_budget_mb). The engine pushes and never waits for readers: the lock guards only
// pointer copies, and a reader holds its frames by shared_ptr after the lock is released.
// Alongside the frames it keeps the scalar history (step, loss, grad norm, …) of every step, which
// is small, so plots keep their whole run when old frames are dropped.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "model/probe/frame.h"

namespace memscope::model {

struct ScalarRow {
  int64_t step = 0;
  FrameKind kind = FrameKind::Inspect;
  int64_t train_step = 0;
  double loss = 0, acc = 0, grad_norm = 0, lr = 0, tokens_per_s = 0;
  float mean_norm_m = 0;  // ‖M‖ averaged over layers and heads (first weight)
  float max_ns_error = 0;
};

class FrameRing {
 public:
  explicit FrameRing(int64_t budget_bytes);

  void push(std::shared_ptr<const Frame> frame);
  // Drops every frame and history row after `step` (a rewind re-runs them).
  void truncate_after(int64_t step);
  void set_budget(int64_t budget_bytes);

  std::shared_ptr<const Frame> latest() const;
  // The frame with this step, if it is still held.
  std::shared_ptr<const Frame> at_step(int64_t step) const;
  std::vector<std::shared_ptr<const Frame>> frames() const;  // oldest first
  // Rows from index `from` on (a reader appends to what it has; reload from 0 after a truncation).
  std::vector<ScalarRow> history(size_t from = 0) const;
  // Bumped by every truncation, so a reader caching frames knows to reload.
  int64_t generation() const;
  int64_t bytes() const;

 private:
  void enforce_budget();  // caller holds mutex_

  mutable std::mutex mutex_;
  std::deque<std::shared_ptr<const Frame>> frames_;
  std::vector<ScalarRow> history_;
  int64_t budget_, bytes_ = 0, generation_ = 0;
};

ScalarRow scalar_row(const Frame& frame);

}  // namespace memscope::model
