#include "viz/decimate.h"

#include <algorithm>
#include <cmath>

namespace memscope::viz {

std::vector<PlotPoint> decimate_minmax(const double* xs, const float* ys, std::size_t count, double x_min,
                                       double x_max, int columns) {
  std::vector<PlotPoint> out;
  if (count == 0 || columns <= 0 || !(x_max > x_min)) return out;
  // Visible samples via binary search: the cost is O(visible), not O(series).
  std::size_t begin = static_cast<std::size_t>(std::lower_bound(xs, xs + count, x_min) - xs);
  std::size_t end = static_cast<std::size_t>(std::upper_bound(xs, xs + count, x_max) - xs);
  if (begin > 0) --begin;
  if (end < count) ++end;

  auto keep = [&](std::size_t i) {
    if (std::isfinite(ys[i])) out.push_back({xs[i], ys[i]});
  };
  if (end - begin <= static_cast<std::size_t>(columns) * 2) {
    for (std::size_t i = begin; i < end; ++i) keep(i);
    return out;
  }

  const double column_width = (x_max - x_min) / columns;
  std::size_t i = begin;
  while (i < end) {
    // One bucket: every sample that falls in the same pixel column as sample i.
    const double column = std::floor((xs[i] - x_min) / column_width);
    std::size_t first = end, last = end, lo = end, hi = end;
    for (; i < end && std::floor((xs[i] - x_min) / column_width) == column; ++i) {
      if (!std::isfinite(ys[i])) continue;
      if (first == end) first = lo = hi = i;
      last = i;
      if (ys[i] < ys[lo]) lo = i;
      if (ys[i] > ys[hi]) hi = i;
    }
    if (first == end) continue;
    // Emit first, extremes in x order, last: the polyline passes through min and max.
    std::size_t picks[4] = {first, std::min(lo, hi), std::max(lo, hi), last};
    std::size_t previous = end;
    for (std::size_t p : picks)
      if (p != previous) out.push_back({xs[p], ys[p]}), previous = p;
  }
  return out;
}

}  // namespace memscope::viz
