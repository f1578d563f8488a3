#include "viz/axis_ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace memscope::viz {

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || target < 1) return ticks;
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  // Round the raw step to the nearest of 1, 2, 5, 10 (Heckbert, Graphics Gems 1990).
  const double fraction = raw / magnitude;
  const double step = magnitude * (fraction < 1.5 ? 1.0 : fraction < 3.0 ? 2.0 : fraction < 7.0 ? 5.0 : 10.0);
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);  // print 0, not -1e-17
  return ticks;
}

std::string tick_label(double value, double step) {
  int digits = 3;
  if (step > 0 && std::isfinite(step) && std::isfinite(value)) {
    // Digits from the label's leading one down to the step's leading one.
    const double top = std::max(std::abs(value), step);
    digits = std::max(digits, static_cast<int>(std::floor(std::log10(top)) - std::floor(std::log10(step))) + 1);
  }
  char label[48];
  std::snprintf(label, sizeof label, "%.*g", std::min(digits, 15), value);
  return label;
}

}  // namespace memscope::viz
