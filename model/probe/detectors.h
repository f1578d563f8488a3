// The detectors of SPEC §8 over a stream of frames: spikes (z-score against an EMA) of the outer
// loss, the gradient norm and each head's state norm (once per head and sequence), and of the state
// norm against the same place in earlier sequences; NaN/Inf naming the layer, head and tensor;
// NS orthogonality error above a threshold, or above what the same place in a sequence usually
// shows (a degraded Newton–Schulz: see ns_degraded below); and state norm growing too fast: above
// detect.norm_growth times its largest value over the last kNormWindow probes of its stream, so a
// memory refilling after a sequence start, or growing as a sequence is written, is not growth
// (issue 19: comparing with the previous probe fired 380 times per 10k healthy demo steps). Plain C++ on the
// scalars the probes already brought to the host; copyable, so keyframes can save it.
#pragma once
#include <array>
#include <deque>
#include <map>
#include <string>
#include <tuple>
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
  SpikeDetectorConfig spike_config() const;

  DetectConfig config_;
  std::map<std::string, SpikeDetector> spikes_;  // the outer series by stream: "train/loss", "train/grad_norm"
  double previous_lr_ = 0;  // the last training frame's outer learning rate, for detect.lr_jump (0 = none yet)
  static constexpr size_t kNormWindow = 64;     // probes: longer than a demo sequence

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

  // What is kept per memory weight of a layer and head, and per stream (train and inspect frames
  // are separate series). One lookup a weight and frame: the string-keyed maps this replaced cost
  // 8 µs a demo-mqar frame (issue 20's probe budget), mostly building keys.
  struct WeightKey {
    int stream, layer, head;
    std::string weight;  // "M", "W1", …
    bool operator<(const WeightKey& o) const {
      if (stream != o.stream) return stream < o.stream;
      if (layer != o.layer) return layer < o.layer;
      if (head != o.head) return head < o.head;
      return weight < o.weight;
    }
  };
  // A write far larger than usual at its place in a sequence. ‖M‖ rises and falls within each
  // sequence (on the trained demo one head reads 1.9 at token 0 and 45 at token 27), so a 100-fold
  // inner lr at token 0 that took that head to 63 stayed within the moving mean and variance over
  // all tokens, and was found a step late. Against the same place in earlier sequences (log ‖M‖,
  // places and warmup as the NS baseline's) it is 139 standard deviations out. It fires above
  // detect.spike_threshold when ‖M‖ is also above detect.norm_growth times the place's usual value,
  // at most once per sequence and stream, counting the ‖M‖ spikes above: a fault's write stays in
  // memory to the sequence's end, and each later place would report it again. Nor do the rest of
  // that sequence's places enter the statistics: they would teach a blown-up ‖M‖ as usual.
  std::map<int, int64_t> norm_flagged_sequence_;  // stream → the sequence whose ‖M‖ already fired

  struct WeightSeries {
    SpikeDetector norm;      // ‖M‖ (inspect frames)
    SpikeDetector growth_s;  // log(‖S_t‖/‖S_t−1‖) within a sequence, under Muon (inspect frames)
    double previous_norm_s = 0;
    bool ns_high = false;    // NS error above detect.ns_error (fires on crossing)
    NsBaseline ns;
    std::deque<double> recent_norms;  // the last kNormWindow ‖M‖
    std::vector<SpikeDetector> norm_by_place;  // log ‖M‖ per place in the sequence (inspect frames)
    int64_t norm_spiked_sequence = -1;         // the sequence whose ‖M‖ spike this head reported
  };
  std::map<WeightKey, WeightSeries> weights_;
  int64_t inspect_train_step_ = -1;  // the weights' training step the inspect series were learnt under
  // Places already reported non-finite (one event each), shared by the streams: per weight {M, S},
  // and per head its step metrics, by (layer, head, weight) and (layer, head).
  std::map<std::tuple<int, int, std::string>, std::array<bool, 2>> nonfinite_weights_;
  std::map<std::pair<int, int>, std::array<bool, kHeadMetricCount>> nonfinite_heads_;
};

}  // namespace memscope::model
