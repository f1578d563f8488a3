// The detectors of SPEC §8 over a stream of frames: spikes (z-score against an EMA) of the outer
// loss, the gradient norm and each head's state norm; NaN/Inf naming the layer, head and tensor;
// NS orthogonality error above a threshold, or above what the same place in a sequence usually
// shows (a degraded Newton–Schulz: see ns_degraded below); and state norm growing too fast: above
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
  double previous_lr_ = 0;  // the last training frame's outer learning rate, for detect.lr_jump (0 = none yet)

  // A degraded Newton–Schulz (too few steps, bad coefficients) leaves U = NS(S) far from
  // orthogonal. The NS error alone cannot show it: a rank-k S gives √((r−k)/r) by itself, so a
  // healthy sequence start reads 0.98 and a degraded step later in a sequence 0.8–0.9 (issue 19's
  // fault bench: 0 of 20 found by detect.ns_error). Against the same place in earlier sequences,
  // where S has had as many tokens to fill, it stands out: the error is compared with a moving
  // mean and variance per place in the sequence (token 0, 1, …, kNsPlaces − 1 and beyond).
  static constexpr int kNsPlaces = 64;  // S's rank saturates within a head's dimension (≤ 64) of tokens
  static constexpr int kNsWarmup = 8;   // sequences seen at a place before it can fire
  static constexpr int kNsRearm = 16;   // probes within the usual range before a head can fire again
  struct NsBaseline {
    std::vector<SpikeDetector> by_place;
    bool alarmed = false;  // fired, and not yet back in range for kNsRearm probes: one event per episode
    int clean = 0;
  };
  std::map<std::string, NsBaseline> ns_baseline_;  // per head and stream
};

}  // namespace memscope::model
