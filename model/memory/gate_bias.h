// The gates' initial biases (SPEC §1), shared by every memory that has those gates, so the
// memory layer, the self-modifying memories and the CMS start from the same retention and lr.
#pragma once

namespace memscope::model::gate_bias {

constexpr double kRetain = 3.0;    // sigmoid(3) ≈ 0.95
constexpr double kLr = -4.6;       // sigmoid(−4.6) ≈ 0.01: lr starts near 0.01·max_lr
constexpr double kMomentum = 2.2;  // ≈ 0.9
constexpr double kGamma = 2.0;     // gated window weights γ ≈ 0.88

}  // namespace memscope::model::gate_bias
