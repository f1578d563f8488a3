#include "app/gui/timeline_cache.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

namespace memscope::app {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const std::vector<float> kEmpty;

const std::vector<float>& at_or_empty(const std::vector<std::vector<float>>& all, size_t i) {
  return i < all.size() ? all[i] : kEmpty;
}

float mean_surprise(const model::Frame& f) {
  double sum = 0;
  int n = 0;
  for (int l = 0; l < f.layers; ++l)
    for (int h = 0; h < f.heads; ++h) {
      const float s = f.head(l, h, model::HeadMetric::SurpriseBefore);
      if (std::isfinite(s)) sum += s, ++n;
    }
  if (n == 0 && !f.selfmod_error.empty()) {
    // HOPE blocks have no memory layer: their surprise is the main self-modifying memory's target
    // error before its write, ½‖M(k) − v̂‖²/d (the last of each layer's kSelfModMemories).
    const size_t layers = f.selfmod_error.size() / kSelfModMemories;
    for (size_t l = 0; l < layers; ++l) {
      const float s = f.selfmod_error[l * kSelfModMemories + kSelfModMemories - 1];
      if (std::isfinite(s)) sum += s, ++n;
    }
  }
  return n ? static_cast<float>(sum / n) : kNaN;
}

}  // namespace

const char* selfmod_memory_name(int memory) {
  static const char* names[kSelfModMemories] = {"M_k", "M_v", "M_eta", "M_alpha", "M"};
  return memory >= 0 && memory < kSelfModMemories ? names[memory] : "?";
}

void TimelineCache::clear() {
  static std::atomic<uint64_t> revisions{0};
  *this = TimelineCache{};
  revision_ = ++revisions;
}

bool TimelineCache::update(const model::FrameRing& ring) {
  const auto latest = ring.latest();
  const int64_t generation = ring.generation();
  // Identity and step: a freed frame's memory can hold the next newest frame.
  if (generation == generation_ && latest.get() == newest_ && (!latest || latest->step == last_step())) return false;
  if (generation != generation_) {
    const int64_t keep_generation = generation;
    clear();
    generation_ = keep_generation;
  }
  newest_ = latest.get();
  const int64_t have = last_step();
  const bool empty = steps_.empty();
  for (const auto& frame : ring.frames())
    if (empty || frame->step > have) append(*frame);
  return true;
}

void TimelineCache::shape_from(const model::Frame& f) {
  layers_ = f.layers;
  heads_ = f.heads;
  weight_names_ = f.weights;
  cms_levels_ = f.cms_levels;
  // The HOPE arrays are per model layer: [layers, levels] and [layers, 5].
  hope_layers_ = std::max(f.cms_levels ? static_cast<int>(f.cms_norm.size()) / f.cms_levels : 0,
                          static_cast<int>(f.selfmod_error.size()) / kSelfModMemories);
  head_.assign(static_cast<size_t>(layers_ * heads_ * model::kHeadMetricCount), {});
  weight_.assign(static_cast<size_t>(layers_ * heads_) * weight_names_.size() * model::kWeightMetricCount, {});
  cms_norm_.assign(static_cast<size_t>(hope_layers_ * cms_levels_), {});
  cms_tick_.assign(static_cast<size_t>(hope_layers_ * cms_levels_), {});
  selfmod_.assign(f.selfmod_error.empty() ? 0 : static_cast<size_t>(hope_layers_ * kSelfModMemories), {});
  selfmod_retention_.assign(f.selfmod_error.empty() ? 0 : static_cast<size_t>(hope_layers_ * 2), {});
}

void TimelineCache::append(const model::Frame& f) {
  // A restart can change the model's shape: the old series no longer mean anything.
  if (steps_.empty() || f.layers != layers_ || f.heads != heads_ || f.weights != weight_names_ ||
      f.cms_levels != cms_levels_ || (!f.selfmod_error.empty() && f.selfmod_error.size() != selfmod_.size())) {
    const int64_t generation = generation_;
    const model::Frame* newest = newest_;
    clear();
    generation_ = generation, newest_ = newest;
    shape_from(f);
  }
  steps_.push_back(static_cast<double>(f.step));
  const bool train = f.kind == model::FrameKind::Train;
  if (train && !f.batch_tokens.empty()) train_batch_ = {f.step, f.train_step, f.batch_tokens, f.batch_targets, f.batch_loss};
  train_loss_.push_back(train ? static_cast<float>(f.loss) : kNaN);
  token_loss_.push_back(train ? kNaN : static_cast<float>(f.loss));
  grad_norm_.push_back(static_cast<float>(f.grad_norm));
  acc_.push_back(static_cast<float>(f.acc));
  // A frame that measured nothing per head (a train frame) has empty metric arrays: NaN there.
  const bool has_heads = f.head_metrics.size() == head_.size();
  for (size_t i = 0; i < head_.size(); ++i) head_[i].push_back(has_heads ? f.head_metrics[i] : kNaN);
  const bool has_weights = f.weight_metrics.size() == weight_.size();
  for (size_t i = 0; i < weight_.size(); ++i) weight_[i].push_back(has_weights ? f.weight_metrics[i] : kNaN);
  const bool has_cms = f.cms_norm.size() == cms_norm_.size() && f.cms_tick.size() == cms_tick_.size();
  for (size_t i = 0; i < cms_norm_.size(); ++i) {
    cms_norm_[i].push_back(has_cms ? f.cms_norm[i] : kNaN);
    cms_tick_[i].push_back(has_cms ? f.cms_tick[i] : kNaN);
  }
  const bool has_selfmod = f.selfmod_error.size() == selfmod_.size();
  for (size_t i = 0; i < selfmod_.size(); ++i) selfmod_[i].push_back(has_selfmod ? f.selfmod_error[i] : kNaN);
  // Sessions recorded before the retention probe have none: NaN.
  const bool has_retention = f.selfmod_retention.size() == selfmod_retention_.size();
  for (size_t i = 0; i < selfmod_retention_.size(); ++i)
    selfmod_retention_[i].push_back(has_retention ? f.selfmod_retention[i] : kNaN);
  if (!f.matrices.empty()) snapshot_steps_.push_back(f.step);
  if (f.kind == model::FrameKind::Inspect && f.token >= 0)
    tokens_.push_back({f.step, f.sequence, f.token, f.target, f.predicted, static_cast<float>(f.loss), mean_surprise(f)});
}

int64_t TimelineCache::snapshot_step(int64_t step) const {
  if (step < 0) return snapshot_steps_.empty() ? -1 : snapshot_steps_.back();
  const auto it = std::upper_bound(snapshot_steps_.begin(), snapshot_steps_.end(), step);
  return it == snapshot_steps_.begin() ? -1 : *std::prev(it);
}

const std::vector<float>& TimelineCache::head(int layer, int h, model::HeadMetric m) const {
  if (layer < 0 || layer >= layers_ || h < 0 || h >= heads_) return kEmpty;
  return at_or_empty(head_, (static_cast<size_t>(layer) * heads_ + h) * model::kHeadMetricCount + static_cast<int>(m));
}

const std::vector<float>& TimelineCache::weight(int layer, int h, int w, model::WeightMetric m) const {
  if (layer < 0 || layer >= layers_ || h < 0 || h >= heads_ || w < 0 || w >= weights()) return kEmpty;
  return at_or_empty(weight_, ((static_cast<size_t>(layer) * heads_ + h) * weight_names_.size() + w) *
                                  model::kWeightMetricCount + static_cast<int>(m));
}

const std::vector<float>& TimelineCache::cms_norm(int layer, int level) const {
  if (level < 0 || level >= cms_levels_) return kEmpty;
  return at_or_empty(cms_norm_, static_cast<size_t>(layer) * cms_levels_ + level);
}

const std::vector<float>& TimelineCache::cms_tick(int layer, int level) const {
  if (level < 0 || level >= cms_levels_) return kEmpty;
  return at_or_empty(cms_tick_, static_cast<size_t>(layer) * cms_levels_ + level);
}

const std::vector<float>& TimelineCache::selfmod_error(int layer, int memory) const {
  if (memory < 0 || memory >= kSelfModMemories) return kEmpty;
  return at_or_empty(selfmod_, static_cast<size_t>(layer) * kSelfModMemories + memory);
}

const std::vector<float>& TimelineCache::selfmod_retention(int layer, int bound) const {
  if (bound < 0 || bound > 1) return kEmpty;
  return at_or_empty(selfmod_retention_, static_cast<size_t>(layer) * 2 + bound);
}

}  // namespace memscope::app
