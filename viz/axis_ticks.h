// "Nice" axis ticks: multiples of 1, 2 or 5 × 10^k, so labels read 0.5, 1, 1.5 rather than
// 0.5217, 0.9761, …
#pragma once
#include <vector>

namespace memscope::viz {

// Ticks inside [lo, hi], about `target` of them (never more than 2 × target + 1).
std::vector<double> nice_ticks(double lo, double hi, int target = 4);

}  // namespace memscope::viz
