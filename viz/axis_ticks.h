// "Nice" axis ticks: multiples of 1, 2 or 5 × 10^k, so labels read 0.5, 1, 1.5 rather than
// 0.5217, 0.9761, …
#pragma once
#include <string>
#include <vector>

namespace memscope::viz {

// Ticks inside [lo, hi], about `target` of them (never more than 2 × target + 1).
std::vector<double> nice_ticks(double lo, double hi, int target = 4);

// A tick's label with enough significant digits that ticks `step` apart read differently
// (17.85, 17.9, 17.95 rather than 17.9 three times), and at least 3 ("%g" style).
std::string tick_label(double value, double step);

}  // namespace memscope::viz
