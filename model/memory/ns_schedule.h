// The Newton–Schulz iteration schedule of the muon optimiser (SPEC §6), as plain data: the
// memory rule, the knobs and every header that includes them stay free of torch.
#pragma once
#include <array>
#include <vector>

namespace memscope::model {

// One quintic iteration X ← a·X + (b·A + c·A²)·X with A = X Xᵀ.
using NsCoefficients = std::array<double, 3>;

// Muon's default triple (K. Jordan, 2024).
inline constexpr NsCoefficients kMuonCoefficients{3.4445, -4.7750, 2.0315};

// Iteration schedule: either `steps` repeats of one triple, or one triple per step
// (LaCT / Polar Express style); a per-step list wins when non-empty.
struct NsSchedule {
  int steps = 5;
  NsCoefficients coefficients = kMuonCoefficients;
  std::vector<NsCoefficients> per_step;

  int iterations() const { return per_step.empty() ? steps : static_cast<int>(per_step.size()); }
  const NsCoefficients& at(int i) const { return per_step.empty() ? coefficients : per_step[i]; }
};

}  // namespace memscope::model
