// The detectors of SPEC §8 over a stream of frames: spikes (z-score against an EMA) of the outer
// loss, the gradient norm and each head's state norm; NaN/Inf naming the layer, head and tensor;
// NS orthogonality error above a threshold; and state norm growing too fast: above
// detect.norm_growth times its largest value over the last kNormWindow probes of its stream, so a
// memory refilling after a sequence start, or growing as a sequence is written, is not growth
// (issue 19: comparing with the previous probe fired 380 times per 10k healthy demo steps). Plain C++ on the
// scalars the probes already brought to the host; copyable, so keyframes can save it.
#pragma once
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "model/probe/event.h"
#include "model/probe/frame.h"
#include "model/probe/probe_config.h"
#include "model/probe/spike_detector.h"

namespace memscope::model {

class Detectors {
 public:
  explicit Detectors(DetectConfig config = {});

  // Live knob change: thresholds apply from the next frame; spike statistics are kept.
  void set_config(const DetectConfig& config);

  // The events `frame` fires, in a stable order.
  std::vector<Event> observe(const Frame& frame);

  // Forget the statistics (a new model, a memory reset).
  void reset();

 private:
  SpikeDetector& series(const std::string& key);

  DetectConfig config_;
  std::map<std::string, SpikeDetector> spikes_;  // by series: "train/loss", "inspect/l0/h1/M/norm", …
  static constexpr size_t kNormWindow = 64;     // probes: longer than a demo sequence
  std::map<std::string, std::deque<double>> recent_norms_;  // the last kNormWindow ‖M‖ per head and stream
  std::map<std::string, bool> nonfinite_;        // places already reported non-finite (one event each)
  std::map<std::string, bool> ns_high_;          // heads whose NS error is above the threshold (fires on crossing)
  std::map<std::string, double> previous_norm_s_;  // the last ‖S‖ per head and stream, for S's growth
};

}  // namespace memscope::model
