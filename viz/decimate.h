// Min/max decimation for line plots (Tracy's method): per pixel column keep the first, smallest,
// largest and last sample, so a one-sample spike never disappears and a million points draw as
// a few thousand vertices.
#pragma once
#include <cstddef>
#include <vector>

namespace memscope::viz {

class MinMaxPyramid;

struct PlotPoint {
  double x;
  float y;
  // A run of more than kGapSamples non-finite samples (or a whole pixel column of them) comes
  // before this point: the line breaks here instead of bridging, e.g. the training steps between
  // two inspect bursts. Shorter runs (an unprobed step, a filler token) are bridged.
  bool gap = false;
};
inline constexpr std::size_t kGapSamples = 8;

// xs must be ascending (steps). Keeps the samples with x in [x_min, x_max] plus one neighbour on
// each side (so lines run to the plot's edges), bucketed into `columns` pixel columns. Non-finite
// y values are dropped (the plot marks them separately) and long runs of them mark a gap. The output is in x order, at most
// 4 points per column plus the two neighbours; it is exact (every input sample kept) when there
// are fewer samples than columns.
std::vector<PlotPoint> decimate_minmax(const double* xs, const float* ys, std::size_t count, double x_min,
                                       double x_max, int columns);

// The same output, with each column's extremes read from `summary` instead of a scan:
// O(columns · log count) rather than O(visible samples). `summary` must summarise these very
// ys[0, count) (viz/series_summary_cache.h keeps that true for line plots); one of another
// length is ignored and the scan runs.
std::vector<PlotPoint> decimate_minmax(const double* xs, const float* ys, std::size_t count, double x_min,
                                       double x_max, int columns, const MinMaxPyramid& summary);

}  // namespace memscope::viz
