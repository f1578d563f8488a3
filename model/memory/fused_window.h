// What the fused steps over an Omega window share (fused_window_step.cpp for a linear memory,
// fused_mlp_step.cpp for the MLP one): the key and query features, and the ring of the window's
// c − 1 older tokens, oldest first (SPEC §2, §4). The ring's slots before the sequence start carry
// γ = 0, so they add nothing to a window's loss.
#pragma once
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/memory/memory_layer.h"  // MemoryState

namespace memscope::model {

// φ = Σ_i a_i ẑ^i with ẑ = z/max(‖z‖, 1e-12) (identity features: ẑ), as features() computes it.
class FusedFeatures {
 public:
  // coefficients: the layer's poly_coefficients, undefined for identity features.
  explicit FusedFeatures(const at::Tensor& coefficients) {
    if (!coefficients.defined()) return;
    const at::Tensor a = coefficients.to(at::kFloat).contiguous();
    poly_.assign(a.data_ptr<float>(), a.data_ptr<float>() + a.numel());
  }

  void operator()(const float* z, float* phi, int64_t d) const {
    double squares = 0;
    for (int64_t i = 0; i < d; ++i) squares += static_cast<double>(z[i]) * z[i];
    const float norm = std::max(static_cast<float>(std::sqrt(squares)), 1e-12f);
    for (int64_t i = 0; i < d; ++i) {
      const float x = z[i] / norm;
      if (poly_.empty()) {
        phi[i] = x;
        continue;
      }
      float acc = poly_.back() * x;  // Horner, as apply_feature_map: x·(a_1 + x·(a_2 + …))
      for (size_t k = poly_.size() - 1; k-- > 0;) acc = (acc + poly_[k]) * x;
      phi[i] = acc;
    }
  }

 private:
  std::vector<float> poly_;  // a_1..a_p
};

// One step's window of c tokens per (sequence, head): gather() lays out the ring's older tokens and
// this one, advance() keeps the newest c − 1 for the next step, commit() stores them in the state.
class FusedWindow {
 public:
  FusedWindow(const MemoryState& state, int64_t c, int64_t d) : c_(c), d_(d) {
    if (c < 2) return;
    ring_phi_ = state.ring_phi.to(at::kFloat).contiguous();
    ring_v_ = state.ring_v.to(at::kFloat).contiguous();
    ring_gamma_ = state.ring_gamma.to(at::kFloat).contiguous();
    next_phi_ = at::empty_like(ring_phi_);
    next_v_ = at::empty_like(ring_v_);
    next_gamma_ = at::empty_like(ring_gamma_);
  }

  // keys, values [c,d] and gammas [c] of head bh, oldest first; this token's φ(k) and v last, with
  // γ = 1 (no γ gate).
  void gather(int64_t bh, const float* phi_k, const float* v, float* keys, float* values,
              float* gammas) const {
    const int64_t older = c_ - 1;
    if (older > 0) {
      std::copy_n(ring_phi_.data_ptr<float>() + bh * older * d_, older * d_, keys);
      std::copy_n(ring_v_.data_ptr<float>() + bh * older * d_, older * d_, values);
      std::copy_n(ring_gamma_.data_ptr<float>() + bh * older, older, gammas);
    }
    std::copy_n(phi_k, d_, keys + older * d_);
    std::copy_n(v, d_, values + older * d_);
    gammas[older] = 1.0f;
  }

  // The ring moves on by one token: the window's newest c − 1.
  void advance(int64_t bh, const float* keys, const float* values, const float* gammas) {
    const int64_t older = c_ - 1;
    if (older == 0) return;
    std::copy_n(keys + d_, older * d_, next_phi_.data_ptr<float>() + bh * older * d_);
    std::copy_n(values + d_, older * d_, next_v_.data_ptr<float>() + bh * older * d_);
    std::copy_n(gammas + 1, older, next_gamma_.data_ptr<float>() + bh * older);
  }

  void commit(MemoryState& state) const {
    if (c_ < 2) return;
    state.ring_phi = next_phi_.to(state.ring_phi.dtype());
    state.ring_v = next_v_.to(state.ring_v.dtype());
    state.ring_gamma = next_gamma_.to(state.ring_gamma.dtype());
  }

 private:
  int64_t c_, d_;
  at::Tensor ring_phi_, ring_v_, ring_gamma_, next_phi_, next_v_, next_gamma_;
};

}  // namespace memscope::model
