// Spike detection of SPEC §8: a z-score against an exponential moving mean and variance.
// Plain C++ (no torch): it runs on the host on scalars the probes already copied back.
#pragma once
#include <cstdint>
#include <optional>

namespace memscope::model {

struct SpikeDetectorConfig {
  double threshold = 6.0;   // z-score above which a sample is a spike (knob)
  double half_life = 100.0; // steps for the EMA weight of a sample to halve (knob)
  int warmup = 20;          // samples seen before any spike can fire
};

struct Spike {
  std::int64_t step;
  double value;
  double z;
};

class SpikeDetector {
 public:
  explicit SpikeDetector(SpikeDetectorConfig config = {});

  // Scores value against the statistics so far, then folds it in (an isolated spike clipped to
  // the threshold, so that it does not hide the next one). Non-finite values are not spikes here
  // (the NaN/Inf detector names them) and leave the statistics untouched.
  std::optional<Spike> observe(std::int64_t step, double value);

  // New threshold and half-life from the next sample on; the statistics so far are kept.
  void set_config(SpikeDetectorConfig config);

  double mean() const { return mean_; }
  double variance() const { return variance_; }
  void reset();

 private:
  SpikeDetectorConfig config_;
  double decay_;
  double mean_ = 0.0, variance_ = 0.0;
  std::int64_t seen_ = 0;
  bool last_was_spike_ = false;
};

}  // namespace memscope::model
