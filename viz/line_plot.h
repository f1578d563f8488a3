// Line plots against step: several series, a legend, event markers on the shared step axis,
// a hover readout, and zoom (wheel) / pan (drag) / follow (double-click). Series of a million
// points draw through min/max decimation (viz/decimate.h) over a summary kept across frames
// (viz/series_summary_cache.h), so a growing series costs little more than its new samples.
#pragma once
#include <imgui.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace memscope::viz {

struct PlotSeries {
  const char* name;
  const double* xs;  // ascending steps
  const float* ys;
  std::size_t count;
  ImU32 color;
  // Bump when samples already drawn are rewritten in place (not appended) with the count and the
  // newest sample unchanged; see viz/series_summary_cache.h for when the plot notices by itself.
  std::uint64_t revision = 0;
};

struct PlotMarker {
  double x;
  ImU32 color;
  const char* label;  // shown on hover
};

// The x window a plot shows. Follow mode tracks the newest data; zoom or pan leaves it.
struct PlotView {
  bool follow = true;
  double x_min = 0.0, x_max = 1.0;
};

// Draws at the cursor. Returns the step under the mouse when the plot was clicked, else NaN.
double draw_line_plot(const char* id, PlotView& view, const std::vector<PlotSeries>& series,
                      const std::vector<PlotMarker>& markers, ImVec2 size);

}  // namespace memscope::viz
