// How a heatmap or colour bar turns values into [0, 1]: the scale modes of DESIGN "GUI".
#pragma once
#include <cstddef>

namespace memscope::viz {

enum class ScaleMode {
  Symmetric,  // [-m, m] with m = max |finite value|: zero is always the centre colour
  Auto,       // [min, max] of the finite values
  Locked,     // a fixed range the user chose, so frames compare by colour
};

struct ValueRange {
  float lo = 0.0f;
  float hi = 0.0f;
};

struct FiniteStats {
  float min = 0.0f, max = 0.0f, max_abs = 0.0f;
  std::size_t finite = 0, nan = 0, inf = 0;
};

// One pass over values; non-finite values are counted, never part of min/max.
FiniteStats finite_stats(const float* values, std::size_t count);

// The range to colour with. With no finite value the range is [-1, 1] (Symmetric) or [0, 1].
ValueRange choose_range(const FiniteStats& stats, ScaleMode mode, ValueRange locked = {});

}  // namespace memscope::viz
