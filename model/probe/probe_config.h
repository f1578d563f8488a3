// The probe and detector knobs (`probe.*`, `detect.*`): how often the engine measures the memory
// (SPEC §8) and when a measurement becomes an event.
#pragma once
#include <cstdint>

namespace memscope::model {

struct ProbeConfig {
  int64_t every = 1;            // probe.every: scalar metrics every K engine steps
  int64_t matrices_every = 8;   // probe.matrices_every: M, S, ΔM snapshots every K steps (0 = never)
  int64_t downsample = 64;      // probe.downsample: largest side of a displayed matrix snapshot
  bool full_matrices = false;   // probe.full_matrices: snapshots at full size instead
};

struct DetectConfig {
  double spike_threshold = 6.0;   // detect.spike_threshold: z-score of a spike (SPEC §8)
  double spike_half_life = 100.0; // detect.spike_half_life: EMA half-life in probed steps
  int64_t spike_warmup = 20;      // detect.spike_warmup: samples before a spike or norm growth can fire
  // detect.ns_error: NS orthogonality error that fires (0 = off). A rank-k momentum S gives about
  // √((r−k)/r) < 1 by itself, so only values above 1 mean NS is diverging (σ(U) well above 1).
  double ns_error = 1.0;
  double norm_growth = 2.0;       // detect.norm_growth: ‖M‖ ratio between probes that fires (0 = off)
};

}  // namespace memscope::model
