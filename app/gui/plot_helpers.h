// What the plot panels share: the series colours, event markers and one titled plot that seeks
// when clicked.
#pragma once
#include <imgui.h>

#include <vector>

#include <cstdint>

#include "app/gui/run.h"
#include "viz/line_plot.h"

namespace memscope::app {

class GuiApp;

inline constexpr ImU32 kBlue = IM_COL32(90, 170, 255, 255);
inline constexpr ImU32 kOrange = IM_COL32(255, 150, 60, 255);
inline constexpr ImU32 kGreen = IM_COL32(110, 210, 120, 255);
inline constexpr ImU32 kPurple = IM_COL32(170, 130, 255, 255);
inline constexpr ImU32 kRed = IM_COL32(255, 90, 90, 255);
inline constexpr ImU32 kGrey = IM_COL32(170, 170, 170, 255);
inline constexpr ImU32 kYellow = IM_COL32(240, 220, 80, 255);

// The timeline's detector, breakpoint and error events as markers (commands are left out).
std::vector<viz::PlotMarker> event_markers(const Run& run, int timeline);
// A muted title line, then the plot filling the width; a click seeks the app to that step.
void plot(GuiApp& app, const char* id, const char* title, const std::vector<viz::PlotSeries>& series,
          const std::vector<viz::PlotMarker>& markers, float height);
// Whether a series has any finite value: plots without one are left out. Scans newest first, so a
// live series stops at its last sample; an all-NaN series costs one pass over it.
bool has_values(const std::vector<float>& ys);
// The layer radio buttons the plots share (the head comes from the memory panel).
void draw_layer_selector(GuiApp& app);
// PlotSeries::revision for a series of (layer, head) of a cache: the plots' decimation summaries
// are kept per plot and series slot, so switching the layer or head must read as a new series.
uint64_t series_revision(const TimelineCache& cache, int layer, int head);
// "label 0 1 2 …": one radio button per index in [0, count), captioned by `name(i)` when given;
// `value` is kept in range.
void draw_index_radios(const char* label, int count, int& value, const char* (*name)(int) = nullptr);

}  // namespace memscope::app
