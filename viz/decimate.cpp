#include "viz/decimate.h"

#include <algorithm>
#include <cmath>

#include "viz/minmax_pyramid.h"

namespace memscope::viz {
namespace {

// Buckets the visible samples into pixel columns and emits first, extremes and last of each;
// extremes(begin, end) gives the finite extremes of ys[begin, end) (a scan or the pyramid).
template <typename ExtremesOf>
std::vector<PlotPoint> decimate(const double* xs, const float* ys, std::size_t count, double x_min, double x_max,
                                int columns, ExtremesOf extremes) {
  std::vector<PlotPoint> out;
  if (count == 0 || columns <= 0 || !(x_max > x_min)) return out;
  // Visible samples via binary search: the cost is O(visible), not O(series).
  std::size_t begin = static_cast<std::size_t>(std::lower_bound(xs, xs + count, x_min) - xs);
  std::size_t end = static_cast<std::size_t>(std::upper_bound(xs, xs + count, x_max) - xs);
  if (begin > 0) --begin;
  if (end < count) ++end;

  if (end - begin <= static_cast<std::size_t>(columns) * 2) {
    std::size_t skipped = 0;
    for (std::size_t i = begin; i < end; ++i) {
      if (!std::isfinite(ys[i])) {
        ++skipped;
        continue;
      }
      out.push_back({xs[i], ys[i], !out.empty() && skipped > kGapSamples});
      skipped = 0;
    }
    return out;
  }

  out.reserve(static_cast<std::size_t>(columns) * 4 + 2);
  const double column_width = (x_max - x_min) / columns;
  auto column_of = [&](std::size_t i) { return std::floor((xs[i] - x_min) / column_width); };
  constexpr std::size_t kNone = MinMaxPyramid::kNone;
  bool empty_column = false;  // since the last emitted point
  for (std::size_t i = begin; i < end;) {
    // One bucket: the samples in the same pixel column as sample i. column_of never decreases
    // along xs, so the bucket's end is a binary search with the very expression that defines it.
    const double column = column_of(i);
    std::size_t stop = i + 1;
    if (stop < end && column_of(stop) == column) {
      std::size_t n = end - stop, base = stop;
      while (n > 0) {
        const std::size_t half = n / 2;
        if (column_of(base + half) == column) base += half + 1, n -= half + 1;
        else n = half;
      }
      stop = base;
    }
    const auto [lo, hi] = extremes(i, stop);
    const std::size_t bucket = i;
    i = stop;
    if (lo == kNone) {  // a whole pixel column without a finite sample: a visible gap
      empty_column = true;
      continue;
    }
    // The first and last finite samples lie no further in than the extremes, so finding them
    // scans only non-finite samples.
    std::size_t first = bucket, last = stop - 1;
    while (!std::isfinite(ys[first])) ++first;
    while (!std::isfinite(ys[last])) --last;
    // Emit first, extremes in x order, last: the polyline passes through min and max.
    const std::size_t picks[4] = {first, std::min(lo, hi), std::max(lo, hi), last};
    std::size_t previous = kNone;
    for (std::size_t p : picks)
      if (p != previous) {
        out.push_back({xs[p], ys[p], previous == kNone && !out.empty() && empty_column});
        previous = p;
      }
    empty_column = false;
  }
  return out;
}

}  // namespace

std::vector<PlotPoint> decimate_minmax(const double* xs, const float* ys, std::size_t count, double x_min,
                                       double x_max, int columns) {
  return decimate(xs, ys, count, x_min, x_max, columns, [&](std::size_t begin, std::size_t end) {
    MinMaxPyramid::Extremes e;
    for (std::size_t i = begin; i < end; ++i) {
      if (!std::isfinite(ys[i])) continue;
      if (e.lo == MinMaxPyramid::kNone) e.lo = e.hi = i;
      if (ys[i] < ys[e.lo]) e.lo = i;
      if (ys[i] > ys[e.hi]) e.hi = i;
    }
    return e;
  });
}

std::vector<PlotPoint> decimate_minmax(const double* xs, const float* ys, std::size_t count, double x_min,
                                       double x_max, int columns, const MinMaxPyramid& summary) {
  if (summary.size() != count) return decimate_minmax(xs, ys, count, x_min, x_max, columns);
  return decimate(xs, ys, count, x_min, x_max, columns,
                  [&](std::size_t begin, std::size_t end) { return summary.extremes(ys, begin, end); });
}

}  // namespace memscope::viz
