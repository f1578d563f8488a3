// Shared by the engine tests: a small demo-mqar (one CPU second per few dozen steps) and helpers
// that run an engine to completion and compare frames.
#pragma once
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/engine/engine.h"

namespace memscope::test {

inline model::EngineOptions small_engine(std::vector<std::string> extra = {}) {
  model::EngineOptions o;
  o.preset = "demo-mqar";
  o.sets = {"model.d_model=16", "model.memory_heads=2", "model.attention_heads=2", "model.window=4",
            "model.persistent=2", "task.keys=8", "task.values=8", "task.pairs=3", "task.queries=3", "task.gap=2",
            "train.batch=2", "train.chunk=2", "probe.matrices_every=2", "engine.keyframe_every=4"};
  for (auto& s : extra) o.sets.push_back(std::move(s));
  return o;
}

// Keeps every frame the engine emits (the ring may drop; a sink never does).
class FrameLog : public model::FrameSink {
 public:
  void on_frame(const model::Frame& f) override {
    std::lock_guard<std::mutex> lock(mutex_);
    frames.push_back(f);
  }
  void on_event(const model::Event& e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    events.push_back(e);
  }
  std::vector<model::Frame> of_timeline(int t) const {
    std::vector<model::Frame> out;
    for (const auto& f : frames)
      if (f.timeline == t) out.push_back(f);
    return out;
  }
  std::vector<model::Frame> frames;
  std::vector<model::Event> events;

 private:
  std::mutex mutex_;
};

inline bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline bool same_double(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Bit-identical probe content (wall-clock fields aside: seconds, tokens/s).
inline bool same_frame(const model::Frame& a, const model::Frame& b) {
  if (a.step != b.step || a.kind != b.kind || a.train_step != b.train_step || a.sequence != b.sequence ||
      a.token_index != b.token_index || a.token != b.token || a.predicted != b.predicted || a.target != b.target)
    return false;
  if (!same_double(a.loss, b.loss) || !same_double(a.acc, b.acc) || !same_double(a.grad_norm, b.grad_norm) ||
      !same_double(a.lr, b.lr))
    return false;
  if (!same_floats(a.head_metrics, b.head_metrics) || !same_floats(a.weight_metrics, b.weight_metrics)) return false;
  if (a.matrices.size() != b.matrices.size()) return false;
  for (size_t i = 0; i < a.matrices.size(); ++i)
    if (!same_floats(a.matrices[i].values, b.matrices[i].values)) return false;
  return true;
}

}  // namespace memscope::test
