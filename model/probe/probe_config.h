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
  // detect.spike_threshold: z-score of a spike. SPEC §8 says 6; 7.5 comes from issue 19's benches
  // (README "How the detector defaults were chosen"): healthy demo runs reach z 7.2 after the
  // warmup, the planted faults 8–300.
  double spike_threshold = 7.5;
  double spike_half_life = 100.0; // detect.spike_half_life: EMA half-life in probed steps
  // detect.spike_warmup: samples before a spike can fire, and before norm growth can (at most the
  // growth window). 60 covers a demo-mqar sequence and a half: the first sequence alone does not
  // show where in a sequence ‖M‖ peaks (at 20, 3 of the healthy runs' spikes came at steps 53–81).
  int64_t spike_warmup = 60;
  // detect.ns_error: NS orthogonality error that fires (0 = off). A rank-k momentum S gives about
  // √((r−k)/r) < 1 by itself, so only values above 1 mean NS is diverging (σ(U) well above 1).
  double ns_error = 1.0;
  // detect.ns_degraded: how far (absolute) the NS error must rise above its moving mean at the same
  // place in the sequence, on top of a z-score of detect.spike_threshold there (0 = off). 0.05 is
  // below what a degraded NS shows past a sequence's first tokens (0.05–0.5) and above the healthy
  // drift (README "How the detector defaults were chosen").
  double ns_degraded = 0.05;
  double norm_growth = 2.0;       // detect.norm_growth: ‖M‖ over its largest in the last 64 probes that fires (0 = off)
  // detect.lr_jump: the outer learning rate rising by more than this factor from one training step
  // to the next fires a spike (0 = off). The schedule never does it: warmup at most doubles it.
  // Through its effects alone a 30× lr for one step went unseen 9 times in 10 on the trained demo
  // (README "How the detector defaults were chosen").
  double lr_jump = 10.0;
  // detect.loss_floor: nats the training loss must rise above its moving mean, on top of a z-score
  // of detect.spike_threshold, to be a spike; a gradient-norm spike is then reported with it, not
  // alone (0 = off: every loss and gradient-norm spike fires, as SPEC §8 reads). A converged model's
  // loss wobbles by up to 0.1 nats at z up to 300; a corrupt batch lifts it 4.7 nats and more
  // (README "How the detector defaults were chosen").
  double loss_floor = 0.5;
};

}  // namespace memscope::model
