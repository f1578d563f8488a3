// Singular values of a shown matrix, for the enlarged view's spectrum (SPEC §8: the effective
// rank is a function of these). Plain floats in and out; the one GUI file that uses LibTorch.
#pragma once
#include <vector>

namespace memscope::app {

// The singular values of a row-major rows × cols matrix, largest first. Non-finite input gives
// an empty result (the heatmap already shows where the NaN is).
std::vector<float> singular_values(const float* values, int rows, int cols);

}  // namespace memscope::app
