// Frame: what one engine step measured (SPEC §8), as plain host data. No torch here: the GUI,
// the session writer and the frame ring read frames without LibTorch (DESIGN principles 1 and 6).
//
// Metrics are flat float arrays with a fixed layout so that a frame is one device-to-host copy and
// a session chunk is a handful of dense tensors. NaN means "not measured at this step" (e.g. the
// gates of a training frame, which has no single token).
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace memscope::model {

// Per layer and head: what the step did to this head (inspect frames only).
enum class HeadMetric {
  Retain,          // α_t (SPEC §1), after any override
  Lr,              // η_t
  Momentum,        // β_t
  Gamma,           // this token's own window gate γ_t
  RetainMin,       // effective retention: the smallest eigenvalue of the retention map (dgd:
  RetainMax,       //   αI − ηφφᵀ; otherwise both are α_t), SPEC §8
  SurpriseBefore,  // L_t(M_{t−1})
  SurpriseAfter,   // L_t(M_t)
  Gain,            // SurpriseBefore − SurpriseAfter: the memorisation gain
  kCount
};
inline constexpr int kHeadMetricCount = static_cast<int>(HeadMetric::kCount);

// Per layer, head and memory weight (linear: "M"; mlp: "W1", "W2").
enum class WeightMetric {
  NormM,      // ‖M‖_F
  NormS,      // ‖S‖_F (momentum buffer)
  NormDM,     // ‖M_t − M_{t−1}‖_F (inspect frames)
  Erank,      // effective rank of M (Roy & Vetterli)
  NsError,    // ‖UᵀU − I‖_F/√r for U = NS_k(S_t) (muon only)
  NsSmin,     // U's smallest singular value
  NsSmax,     // U's largest
  NonFinite,  // bit 1: M has NaN/Inf, bit 2: S has, bit 4: the step's gates or surprise have
  // The backward through the inner loop (issue 18; inner_backward.h), stepping into a training
  // step: the outer loss's gradient at this token's state. NaN elsewhere and in older sessions.
  GradM,      // ‖∂L/∂M_t‖_F
  GradS,      // ‖∂L/∂S_t‖_F (gd-momentum and muon)
  GradNs,     // ‖∂L/∂S_t‖_F through this token's Newton–Schulz call alone (muon)
  kCount
};
// Sessions written before the backward metrics hold only the first eight series.
inline constexpr int kWeightMetricCountV1 = static_cast<int>(WeightMetric::GradM);
inline constexpr int kWeightMetricCount = static_cast<int>(WeightMetric::kCount);

const char* to_string(HeadMetric m);    // "retain", "lr", …, the names of SPEC §8 and the CLI
const char* to_string(WeightMetric m);  // "norm_M", "norm_S", "norm_dM", "erank", …

enum class FrameKind { Train, Inspect };
const char* to_string(FrameKind kind);

// A matrix for display: M, S or ΔM of one head, area-averaged down to at most probe.downsample
// per side (or full size with probe.full_matrices).
struct MatrixSnapshot {
  int layer = 0, head = 0;
  std::string weight;  // "M", "W1", "W2"
  std::string tensor;  // "M", "S", "dM"
  int rows = 0, cols = 0;            // of `values`, row-major
  int full_rows = 0, full_cols = 0;  // of the matrix it shows
  std::vector<float> values;
  // When `values` is a shrunk copy: the singular values of the full matrix, largest first, so the
  // enlarged view's spectrum is the real one (issue 19). Live frames only: recordings and the wire
  // keep the shown copy, whose spectrum the view then labels as such.
  std::vector<float> singular_values;
  // With singular_values: the full matrix's finite range and its NaN and Inf counts, which the
  // shrunk copy's area means would hide (one NaN spreads over a cell; an extreme entry is averaged).
  float full_min = 0, full_max = 0;
  int64_t full_nan = 0, full_inf = 0;
};

inline constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

struct Frame {
  int64_t step = 0;        // engine steps completed on this timeline, counting from 1
  int timeline = 0;        // 0: the main timeline; forks count from 1
  FrameKind kind = FrameKind::Inspect;
  int64_t train_step = 0;  // optimiser steps completed
  // Inspect frames: the probe stream position.
  int64_t sequence = -1;     // which probe sequence
  int64_t token_index = -1;  // position inside it
  int64_t token = -1;        // the token fed
  int64_t target = -1;       // the token it should predict next (-1: not scored)
  int64_t predicted = -1;    // the model's argmax
  // Outer numbers: train frames have all of them; inspect frames have loss (−log p(target)).
  double loss = kNotMeasured, acc = kNotMeasured, grad_norm = kNotMeasured, lr = kNotMeasured;
  double tokens_per_s = kNotMeasured;
  double seconds = 0;  // wall time of the step itself

  int layers = 0, heads = 0;
  std::vector<std::string> weights;  // memory weight names, the W axis
  std::vector<float> head_metrics;   // [layers, heads, kHeadMetricCount]
  std::vector<float> weight_metrics; // [layers, heads, weights, kWeightMetricCount]
  std::vector<MatrixSnapshot> matrices;

  // HOPE (SPEC §7, issue 8), batch row 0 after the step; empty without the CMS or hope blocks.
  int cms_levels = 0;
  std::vector<float> cms_norm;       // [layers, cms_levels]: sqrt(‖W1‖² + ‖W2‖²) of each CMS level
  std::vector<float> cms_tick;       // [layers, cms_levels]: 1 where the level updated after the step's last token
  std::vector<float> selfmod_error;  // [layers, 5] (hope): the last write's ½‖M(k) − v̂‖²/d for k, v, eta, alpha, memory
  // [layers, 2] (hope): the smallest and largest eigenvalue of the last write's diagonal dgd preconditioner
  // α − η⊙k², the self-modifying memories' effective retention (SPEC §8)
  std::vector<float> selfmod_retention;
  // [layers, 5] (hope, stepping into a training step): ‖∂L/∂W_t‖ of each self-modifying memory
  // (k, v, eta, alpha, memory; W1 and W2 together), the backward through the inner loop (inner_backward.h)
  std::vector<float> selfmod_grad;
  // Per-feature retain and lr of the step's write (seed 004 change 3): [layers, feature_rows, feature_dim], rows are
  // the memory heads (memory.dgd.per_feature) or 1 (hope blocks); empty otherwise.
  int feature_rows = 0, feature_dim = 0;
  std::vector<float> retain_feature, lr_feature;

  // Train frames (train.module_norms, issue 18): per module of the model, the outer gradient norm
  // before clipping and the step's update-to-weight ratio ‖Δθ‖/‖θ‖. Empty otherwise.
  std::vector<std::string> module_names;  // "layer0/memory.W_K", "embedding", … (model/train/module_norms.h)
  std::vector<float> module_grad_norm, module_update_ratio;
  // Train frames: row 0 of the batch trained, for the train view (issue 19): tokens, targets (−1:
  // none) and each token's −log p(target) before the update (NaN: no target). Recorded as the
  // chunk tensors batch_tokens, batch_targets (I64) and batch_loss (F32), [rows, T].
  std::vector<int64_t> batch_tokens, batch_targets;
  std::vector<float> batch_loss;

  float head(int layer, int h, HeadMetric m) const {
    return head_metrics[(static_cast<size_t>(layer) * heads + h) * kHeadMetricCount + static_cast<int>(m)];
  }
  float weight(int layer, int h, int w, WeightMetric m) const {
    return weight_metrics[((static_cast<size_t>(layer) * heads + h) * weights.size() + w) * kWeightMetricCount +
                          static_cast<int>(m)];
  }
  // Host memory the frame holds (the frame ring's budget counts this).
  int64_t bytes() const;
};

}  // namespace memscope::model
