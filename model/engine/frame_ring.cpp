#include "model/engine/frame_ring.h"

#include <algorithm>
#include <cmath>

#include "model/util/allocator.h"

namespace memscope::model {

ScalarRow scalar_row(const Frame& f) {
  ScalarRow r;
  r.step = f.step;
  r.kind = f.kind;
  r.train_step = f.train_step;
  r.loss = f.loss;
  r.acc = f.acc;
  r.grad_norm = f.grad_norm;
  r.lr = f.lr;
  r.tokens_per_s = f.tokens_per_s;
  const size_t W = f.weights.size();
  double sum = 0;
  float worst = std::numeric_limits<float>::quiet_NaN();
  int n = 0;
  for (int l = 0; l < f.layers; ++l)
    for (int h = 0; h < f.heads; ++h)
      if (W > 0) {
        sum += f.weight(l, h, 0, WeightMetric::NormM);
        ++n;
        const float e = f.weight(l, h, 0, WeightMetric::NsError);
        if (std::isfinite(e) && !(e <= worst)) worst = e;
      }
  r.mean_norm_m = n > 0 ? static_cast<float>(sum / n) : std::numeric_limits<float>::quiet_NaN();
  r.max_ns_error = worst;
  return r;
}

FrameRing::FrameRing(int64_t budget_bytes) : budget_(std::max<int64_t>(budget_bytes, 1)) {}

void FrameRing::push(std::shared_ptr<const Frame> frame) {
  const ScalarRow row = scalar_row(*frame);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bytes_ += frame->bytes();
    frames_.push_back(std::move(frame));
    history_.push_back(row);
    enforce_budget();
  }
  advise_heap_growth();  // the ring is what grows the heap (model/util/allocator.h); not under the lock
}

void FrameRing::enforce_budget() {
  // The newest frame always stays, whatever its size.
  while (frames_.size() > 1 && bytes_ > budget_) {
    bytes_ -= frames_.front()->bytes();
    frames_.pop_front();
  }
}

void FrameRing::truncate_after(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!frames_.empty() && frames_.back()->step > step) {
    bytes_ -= frames_.back()->bytes();
    frames_.pop_back();
  }
  while (!history_.empty() && history_.back().step > step) history_.pop_back();
  ++generation_;
}

void FrameRing::set_budget(int64_t budget_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  budget_ = std::max<int64_t>(budget_bytes, 1);
  enforce_budget();
}

std::shared_ptr<const Frame> FrameRing::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return frames_.empty() ? nullptr : frames_.back();
}

std::shared_ptr<const Frame> FrameRing::at_step(int64_t step) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = std::lower_bound(frames_.begin(), frames_.end(), step,
                                   [](const std::shared_ptr<const Frame>& f, int64_t s) { return f->step < s; });
  return it != frames_.end() && (*it)->step == step ? *it : nullptr;
}

std::vector<std::shared_ptr<const Frame>> FrameRing::frames() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {frames_.begin(), frames_.end()};
}

std::vector<ScalarRow> FrameRing::history(size_t from) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (from >= history_.size()) return {};
  return {history_.begin() + static_cast<std::ptrdiff_t>(from), history_.end()};
}

int64_t FrameRing::generation() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return generation_;
}

int64_t FrameRing::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace memscope::model
