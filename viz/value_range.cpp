#include "viz/value_range.h"

#include <algorithm>
#include <cmath>

namespace memscope::viz {

FiniteStats finite_stats(const float* values, std::size_t count) {
  FiniteStats s;
  bool first = true;
  for (std::size_t i = 0; i < count; ++i) {
    const float v = values[i];
    if (std::isnan(v)) {
      ++s.nan;
    } else if (std::isinf(v)) {
      ++s.inf;
    } else {
      s.min = first ? v : std::min(s.min, v);
      s.max = first ? v : std::max(s.max, v);
      first = false;
      ++s.finite;
    }
  }
  s.max_abs = std::max(std::abs(s.min), std::abs(s.max));
  return s;
}

ValueRange choose_range(const FiniteStats& stats, ScaleMode mode, ValueRange locked) {
  switch (mode) {
    case ScaleMode::Locked:
      return locked;
    case ScaleMode::Symmetric: {
      const float m = stats.finite && stats.max_abs > 0.0f ? stats.max_abs : 1.0f;
      return {-m, m};
    }
    case ScaleMode::Auto:
      if (!stats.finite) return {0.0f, 1.0f};
      return {stats.min, stats.max};
  }
  return {0.0f, 1.0f};
}

}  // namespace memscope::viz
