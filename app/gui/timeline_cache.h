// TimelineCache: what the GUI keeps of one timeline between frames: the per-step series its plots
// draw, gathered from the frames the source pushes into its ring. The ring holds whole frames
// within a memory budget; the cache keeps only floats per step, so plots keep their history after
// the ring has dropped old frames, until a rewind: that truncates the ring, and the cache then
// starts over from what the ring still holds (DESIGN principle 2: a slow GUI loses frames from
// its view only).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/engine/frame_ring.h"

namespace memscope::app {

// One token of the probe stream, for the token strip.
struct TokenEntry {
  int64_t step = 0;
  int64_t sequence = -1, token = -1, target = -1, predicted = -1;
  float loss = 0;      // −log p(target), NaN when not scored
  float surprise = 0;  // mean over layers and heads of L_t(M_{t−1}) (SPEC §8)
};

// Row 0 of the newest training batch (train frames), for the token strip in train mode.
struct TrainBatchRow {
  int64_t step = -1;       // the engine step of its train frame; -1: none yet
  int64_t train_step = 0;  // the training step it was
  std::vector<int64_t> tokens, targets;  // targets −1 where none
  std::vector<float> loss;               // −log p(target) before the update, NaN where no target
};

class TimelineCache {
 public:
  // Appends the frames the ring holds past what the cache has; starts over after a truncation.
  // Returns true when anything changed.
  bool update(const model::FrameRing& ring);
  void clear();

  // Shape of the frames, from the first frame seen (0 until then).
  int layers() const { return layers_; }
  int heads() const { return heads_; }
  int weights() const { return static_cast<int>(weight_names_.size()); }
  int cms_levels() const { return cms_levels_; }
  // Layers with HOPE probes: a hope block has no per-head probes, so layers() can be 0 there.
  int hope_layers() const { return hope_layers_; }
  const std::vector<std::string>& weight_names() const { return weight_names_; }

  // The x axis every series shares: the step of each cached frame, ascending.
  const std::vector<double>& steps() const { return steps_; }
  // Outer numbers, NaN where not measured: the training loss of train frames, and the token loss
  // −log p(target) of inspect frames, kept apart because they measure different things.
  const std::vector<float>& train_loss() const { return train_loss_; }
  const std::vector<float>& token_loss() const { return token_loss_; }
  const std::vector<float>& grad_norm() const { return grad_norm_; }
  const std::vector<float>& accuracy() const { return acc_; }
  const std::vector<float>& head(int layer, int head, model::HeadMetric m) const;
  const std::vector<float>& weight(int layer, int head, int w, model::WeightMetric m) const;
  // HOPE (issue 8): ‖level‖ and the update ticks of CMS level `level` in `layer`.
  const std::vector<float>& cms_norm(int layer, int level) const;
  const std::vector<float>& cms_tick(int layer, int level) const;
  // Self-modifying memories' target error, per layer and memory (k, v, eta, alpha, memory).
  const std::vector<float>& selfmod_error(int layer, int memory) const;
  // Their dgd preconditioner's smallest (bound 0) and largest (bound 1) eigenvalue, per layer.
  const std::vector<float>& selfmod_retention(int layer, int bound) const;

  const std::vector<TokenEntry>& tokens() const { return tokens_; }
  const TrainBatchRow& train_batch() const { return train_batch_; }
  // The newest step at or before `step` (< 0: any) whose frame carried matrix snapshots; -1: none.
  int64_t snapshot_step(int64_t step) const;
  int64_t last_step() const { return steps_.empty() ? 0 : static_cast<int64_t>(steps_.back()); }
  int64_t generation() const { return generation_; }
  // Changes whenever the cache starts over (a rewind, a new shape), never when it only grows: the
  // plots' decimation summaries extend while it holds and rebuild when it moves.
  uint64_t revision() const { return revision_; }

 private:
  void append(const model::Frame& f);
  void shape_from(const model::Frame& f);

  int layers_ = 0, heads_ = 0, cms_levels_ = 0, hope_layers_ = 0;
  std::vector<std::string> weight_names_;
  std::vector<double> steps_;
  std::vector<float> train_loss_, token_loss_, grad_norm_, acc_;
  std::vector<std::vector<float>> head_, weight_, cms_norm_, cms_tick_, selfmod_, selfmod_retention_;
  std::vector<TokenEntry> tokens_;
  TrainBatchRow train_batch_;
  std::vector<int64_t> snapshot_steps_;  // ascending
  int64_t generation_ = -1;
  uint64_t revision_ = 0;
  const model::Frame* newest_ = nullptr;  // identity of the ring's newest frame at the last update
};

inline constexpr int kSelfModMemories = 5;  // k, v, eta, alpha, memory (Frame::selfmod_error)
const char* selfmod_memory_name(int memory);

}  // namespace memscope::app
