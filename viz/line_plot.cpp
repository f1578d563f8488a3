#include "viz/line_plot.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>

#include <imgui_internal.h>  // ImRect

#include "viz/axis_ticks.h"
#include "viz/decimate.h"
#include "viz/series_summary_cache.h"
#include "viz/theme.h"

namespace memscope::viz {
namespace {

constexpr float kAxisLabelWidth = 52.0f;
// A plot not drawn for this many frames gives its summaries back (about 2 bytes per sample).
constexpr int kForgetAfterFrames = 600;

// Decimates one series over its summary, which lives as long as the plot keeps being drawn.
std::vector<PlotPoint> decimate_series(ImGuiID plot_id, std::size_t index, const PlotSeries& s, const PlotView& view,
                                       int columns) {
  if (s.count > MinMaxPyramid::kMaxSamples)
    return decimate_minmax(s.xs, s.ys, s.count, view.x_min, view.x_max, columns);
  static SeriesSummaryCache cache;
  static int swept_frame = -1;
  const int frame = ImGui::GetFrameCount();
  if (frame != swept_frame) cache.forget_unused_since(frame - kForgetAfterFrames), swept_frame = frame;
  const std::uint64_t key = (static_cast<std::uint64_t>(plot_id) << 32) | (index & 0xffffffffu);
  const MinMaxPyramid& summary = cache.summary(key, s.ys, s.count, s.revision, frame);
  return decimate_minmax(s.xs, s.ys, s.count, view.x_min, view.x_max, columns, summary);
}

// The data's full x extent over all series.
bool data_extent(const std::vector<PlotSeries>& series, double& lo, double& hi) {
  bool any = false;
  for (const auto& s : series) {
    if (!s.count) continue;
    lo = any ? std::min(lo, s.xs[0]) : s.xs[0];
    hi = any ? std::max(hi, s.xs[s.count - 1]) : s.xs[s.count - 1];
    any = true;
  }
  return any;
}

// Value of the sample nearest to x (binary search), for the hover readout.
bool nearest_sample(const PlotSeries& s, double x, float& y) {
  if (!s.count) return false;
  const double* it = std::lower_bound(s.xs, s.xs + s.count, x);
  std::size_t i = static_cast<std::size_t>(it - s.xs);
  if (i == s.count || (i > 0 && x - s.xs[i - 1] < s.xs[i] - x)) --i;
  y = s.ys[i];
  return true;
}

void zoom_and_pan(PlotView& view, const ImRect& plot, double extent_lo, double extent_hi) {
  ImGuiIO& io = ImGui::GetIO();
  const double span = view.x_max - view.x_min;
  if (io.MouseWheel != 0.0f) {
    const double anchor = view.x_min + (io.MousePos.x - plot.Min.x) / plot.GetWidth() * span;
    const double factor = std::pow(0.85, io.MouseWheel);
    view.x_min = anchor - (anchor - view.x_min) * factor;
    view.x_max = anchor + (view.x_max - anchor) * factor;
    view.follow = false;
  }
  if (ImGui::IsMouseDragging(ImGuiMouseButton_Left) && io.MouseDelta.x != 0.0f) {
    const double shift = -io.MouseDelta.x / plot.GetWidth() * span;
    view.x_min += shift;
    view.x_max += shift;
    view.follow = false;
  }
  if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
    view.follow = true;
    view.x_min = extent_lo;
    view.x_max = extent_hi;
  }
}

}  // namespace

double draw_line_plot(const char* id, PlotView& view, const std::vector<PlotSeries>& series,
                      const std::vector<PlotMarker>& markers, ImVec2 size) {
  ImGui::PushID(id);
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImRect frame(origin, {origin.x + size.x, origin.y + size.y});
  // The legend has a strip of its own along the top, so it never covers the data.
  const float legend_strip = ImGui::GetFontSize() + 6.0f;
  const ImRect plot({frame.Min.x + kAxisLabelWidth, frame.Min.y + legend_strip}, {frame.Max.x - 4.0f, frame.Max.y - 4.0f});
  const ImGuiID plot_id = ImGui::GetID("plot");
  ImGui::InvisibleButton("plot", size);
  const bool hovered = ImGui::IsItemHovered();
  double clicked_step = std::numeric_limits<double>::quiet_NaN();

  double extent_lo = 0.0, extent_hi = 1.0;
  const bool has_data = data_extent(series, extent_lo, extent_hi);
  if (extent_hi <= extent_lo) extent_hi = extent_lo + 1.0;
  if (view.follow) view.x_min = extent_lo, view.x_max = extent_hi;
  if (hovered) zoom_and_pan(view, plot, extent_lo, extent_hi);
  if (view.x_max <= view.x_min) view.x_max = view.x_min + 1.0;

  ImDrawList* draw = ImGui::GetWindowDrawList();
  draw->AddRectFilled(frame.Min, frame.Max, ImGui::GetColorU32(ImGuiCol_FrameBg), 3.0f);

  // Decimate first: the y range comes from exactly what is drawn.
  const int columns = std::max(1, static_cast<int>(plot.GetWidth()));
  std::vector<std::vector<PlotPoint>> decimated;
  float y_lo = std::numeric_limits<float>::max(), y_hi = std::numeric_limits<float>::lowest();
  for (std::size_t k = 0; k < series.size(); ++k) {
    decimated.push_back(decimate_series(plot_id, k, series[k], view, columns));
    for (const auto& p : decimated.back())
      if (p.x >= view.x_min && p.x <= view.x_max) y_lo = std::min(y_lo, p.y), y_hi = std::max(y_hi, p.y);
  }
  if (y_lo > y_hi) y_lo = 0.0f, y_hi = 1.0f;
  if (y_hi - y_lo < 1e-12f) y_lo -= 0.5f, y_hi += 0.5f;
  const float pad = (y_hi - y_lo) * 0.06f;
  y_lo -= pad, y_hi += pad;

  auto to_screen = [&](double x, float y) {
    return ImVec2(static_cast<float>(plot.Min.x + (x - view.x_min) / (view.x_max - view.x_min) * plot.GetWidth()),
                  plot.Max.y - (y - y_lo) / (y_hi - y_lo) * plot.GetHeight());
  };

  const ImU32 grid = ImGui::GetColorU32(ImGuiCol_Border);
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  const auto ticks = nice_ticks(y_lo, y_hi, std::max(2, static_cast<int>(plot.GetHeight() / 40.0f)));
  for (double tick : ticks) {
    const ImVec2 p = to_screen(view.x_min, static_cast<float>(tick));
    draw->AddLine({plot.Min.x, p.y}, {plot.Max.x, p.y}, grid);
    const std::string label = tick_label(tick, ticks.size() > 1 ? ticks[1] - ticks[0] : 0.0);
    draw->AddText({frame.Min.x + 4.0f, p.y - ImGui::GetFontSize() * 0.5f}, text, label.c_str());
  }

  // The step axis: vertical grid lines at nice steps, each labelled at the plot's bottom edge
  // (small and muted, under the data), so every plot reads its own x position.
  const auto x_ticks = nice_ticks(view.x_min, view.x_max, std::max(2, static_cast<int>(plot.GetWidth() / 110.0f)));
  for (double tick : x_ticks) {
    const float x = to_screen(tick, 0.0f).x;
    draw->AddLine({x, plot.Min.y}, {x, plot.Max.y}, grid);
    const std::string label = tick_label(tick, x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 0.0);
    const float small = ImGui::GetFontSize() * 0.8f;
    const float width = ImGui::GetFont()->CalcTextSizeA(small, FLT_MAX, 0.0f, label.c_str()).x;
    if (x + 2.0f + width > plot.Max.x) continue;  // a label the right edge would cut is left out
    draw->AddText(nullptr, small, {x + 2.0f, plot.Max.y - ImGui::GetFontSize() * 0.85f}, text, label.c_str());
  }

  draw->PushClipRect(plot.Min, plot.Max, true);
  for (const auto& m : markers) {
    if (m.x < view.x_min || m.x > view.x_max) continue;
    const float x = to_screen(m.x, 0.0f).x;
    draw->AddLine({x, plot.Min.y}, {x, plot.Max.y}, m.color, 1.5f);
  }
  // Separate segments, not one polyline: ImGui shortens the mitred tip of a very sharp polyline
  // corner, which would draw a one-sample spike lower than it is. A whole-pixel width lets ImGui
  // draw each anti-aliased segment as one textured quad: 1.5 px took ~2x the vertices and ~3x
  // the frame time under llvmpipe (bench/gui_frame).
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& points = decimated[k];
    for (std::size_t i = 1; i < points.size(); ++i) {
      if (points[i].gap) continue;  // a long run without values: no line across it
      draw->AddLine(to_screen(points[i - 1].x, points[i - 1].y), to_screen(points[i].x, points[i].y), series[k].color, 1.0f);
    }
    // A point with no neighbour to draw a line to still shows, as a dot.
    for (std::size_t i = 0; i < points.size(); ++i) {
      const bool joined_before = i > 0 && !points[i].gap, joined_after = i + 1 < points.size() && !points[i + 1].gap;
      if (!joined_before && !joined_after) draw->AddCircleFilled(to_screen(points[i].x, points[i].y), 1.5f, series[k].color);
    }
  }
  draw->PopClipRect();

  // Legend, in its strip above the data.
  float legend_x = plot.Min.x + 6.0f;
  const float legend_y = frame.Min.y + 2.0f;
  for (const auto& s : series) {
    draw->AddRectFilled({legend_x, legend_y + 4.0f}, {legend_x + 10.0f, legend_y + 14.0f}, s.color);
    draw->AddText({legend_x + 14.0f, legend_y + 1.0f}, ImGui::GetColorU32(ImGuiCol_Text), s.name);
    legend_x += 24.0f + ImGui::CalcTextSize(s.name).x;
  }

  if (hovered && has_data) {
    const double x = view.x_min + (ImGui::GetIO().MousePos.x - plot.Min.x) / plot.GetWidth() * (view.x_max - view.x_min);
    const float sx = to_screen(x, 0.0f).x;
    draw->AddLine({sx, plot.Min.y}, {sx, plot.Max.y}, ImGui::GetColorU32(ImGuiCol_TextDisabled));
    ImGui::BeginTooltip();
    ImGui::Text("step %.0f", x);
    for (const auto& s : series) {
      float y = 0.0f;
      if (nearest_sample(s, x, y)) ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(s.color), "%s  %.5g", s.name, y);
    }
    for (const auto& m : markers)
      if (std::abs(to_screen(m.x, 0.0f).x - sx) < 4.0f) ImGui::TextColored(colors::warning(), "%s", m.label);
    ImGui::EndTooltip();
    if (ImGui::IsItemClicked() && !ImGui::IsMouseDragging(ImGuiMouseButton_Left)) clicked_step = std::round(x);
  }
  ImGui::PopID();
  return clicked_step;
}

}  // namespace memscope::viz
