// viz widgets drawn in a real OpenGL window (Xvfb under scripts/test) and checked by pixels:
// the heatmap texture shows each cell in its colormap colour, NaN in its own colour, and a line
// plot draws its series through a spike.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "gui/png_image.h"
#include "gui/widget_frame.h"
#include "viz/app_window.h"
#include "viz/heatmap.h"
#include "viz/line_plot.h"

using namespace memscope::viz;

namespace {

Rgba8 pixel_at(const memscope::test::PngImage& image, int x, int y) {
  const unsigned char* p = image.at(x, y);
  return {p[0], p[1], p[2], 255};
}

bool close_to(const Rgba8& a, const Rgba8& b) {
  return std::abs(a.r - b.r) <= 2 && std::abs(a.g - b.g) <= 2 && std::abs(a.b - b.b) <= 2;
}

// Three frames of `draw` inside a borderless window over the whole AppWindow, then the last one's
// pixels (MEMSCOPE_KEEP_PNG=1 keeps the PNG in /tmp to look at).
memscope::test::PngImage render(AppWindow& window, ImVec2 size, const std::string& name, const std::function<void()>& draw) {
  const std::string path = "/tmp/memscope-" + name + "-" + std::to_string(getpid()) + ".png";
  for (int frame = 1; frame <= 3; ++frame) {
    window.wait_for_events(true);
    window.begin_frame();
    ImGui::SetNextWindowPos({0, 0});
    ImGui::SetNextWindowSize(size);
    ImGui::Begin(name.c_str(), nullptr, ImGuiWindowFlags_NoDecoration);
    draw();
    ImGui::End();
    window.end_frame();
    if (frame == 3) REQUIRE(window.screenshot(path).empty());
    window.present();
  }
  auto image = memscope::test::load_png(path);
  if (!std::getenv("MEMSCOPE_KEEP_PNG")) std::remove(path.c_str());
  return image;
}

}  // namespace

TEST_CASE("heatmap and line plot render their data into the window's pixels", "[gui]") {
  auto owned = memscope::test::open_test_window(900, 600);
  AppWindow& window = *owned;

  // 4 × 4 matrix, values spread over [-1, 1] with one NaN cell.
  std::vector<float> matrix(16);
  for (int i = 0; i < 16; ++i) matrix[i] = -1.0f + 2.0f * static_cast<float>(i) / 15.0f;
  matrix[5] = NAN;
  Heatmap heatmap;
  HeatmapOptions heat_options;
  heat_options.colorbar = false;
  heat_options.scale = ScaleMode::Locked;
  heat_options.locked = {-1.0f, 1.0f};
  heatmap.set_data(matrix.data(), 4, 4, heat_options);

  std::vector<double> xs(5000);
  std::vector<float> ys(5000, 0.0f);
  for (int i = 0; i < 5000; ++i) xs[i] = i;
  ys[2500] = 10.0f;  // a one-sample spike
  const ImU32 series_color = IM_COL32(255, 200, 0, 255);
  PlotView view;

  ImVec2 heat_origin{}, plot_origin{};
  const auto px = render(window, {900, 600}, "widgets", [&] {
    heat_origin = ImGui::GetCursorScreenPos();
    heatmap.draw("m", {400, 400});
    ImGui::SameLine();
    plot_origin = ImGui::GetCursorScreenPos();
    draw_line_plot("p", view, {{"loss", xs.data(), ys.data(), xs.size(), series_color}}, {}, {420, 300});
  });

  const Colormap& map = colormap(ColormapKind::RdBu);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      const int x = static_cast<int>(heat_origin.x + (c + 0.5f) * 100.0f);
      const int y = static_cast<int>(heat_origin.y + (r + 0.5f) * 100.0f);
      const Rgba8 expected = map.map(matrix[r * 4 + c], -1.0f, 1.0f);
      INFO("cell " << r << "," << c);
      CHECK(close_to(pixel_at(px, x, y), expected));
    }
  CHECK(pixel_at(px, static_cast<int>(heat_origin.x + 150), static_cast<int>(heat_origin.y + 150)) == Colormap::nan_color());

  // The spike reaches the top part of the plot: some pixel of the series colour lies in the
  // upper fifth of the plot, near the middle column.
  int spike_pixels = 0;
  for (int y = static_cast<int>(plot_origin.y); y < static_cast<int>(plot_origin.y + 60); ++y)
    for (int x = static_cast<int>(plot_origin.x + 200); x < static_cast<int>(plot_origin.x + 280); ++x)
      spike_pixels += close_to(pixel_at(px, x, y), {255, 200, 0, 255});
  CHECK(spike_pixels > 5);
}

TEST_CASE("a line plot keeps its legend in a strip above the data and labels the step axis", "[gui]") {
  auto owned = memscope::test::open_test_window(700, 300);
  AppWindow& window = *owned;
  // A sawtooth that reaches the top of its range every 50 steps, and a flat second series.
  std::vector<double> xs(1000);
  std::vector<float> saw(1000), flat(1000, 0.5f);
  for (int i = 0; i < 1000; ++i) xs[i] = i, saw[i] = static_cast<float>(i % 50) / 49.0f;
  const ImU32 saw_color = IM_COL32(255, 200, 0, 255), flat_color = IM_COL32(0, 220, 255, 255);
  PlotView view;
  ImVec2 origin{};
  const ImVec2 size{600, 200};
  float font = 0;
  ImVec4 background{};
  const auto px = render(window, {700, 300}, "plot-legend", [&] {
    origin = ImGui::GetCursorScreenPos();
    font = ImGui::GetFontSize();
    background = ImGui::GetStyleColorVec4(ImGuiCol_FrameBg);
    draw_line_plot("p", view, {{"saw", xs.data(), saw.data(), xs.size(), saw_color}, {"flat", xs.data(), flat.data(), xs.size(), flat_color}},
                   {}, size);
  });
  // Lines are antialiased: a pixel of a series is one whose colour leans its way.
  const auto yellowish = [&](int x, int y) {
    const unsigned char* p = px.at(x, y);
    return p[0] > 150 && p[1] > 110 && p[2] < 90;
  };
  const auto cyanish = [&](int x, int y) {
    const unsigned char* p = px.at(x, y);
    return p[0] < 90 && p[1] > 130 && p[2] > 150;
  };
  const int left = static_cast<int>(origin.x), top = static_cast<int>(origin.y);
  const int right = left + static_cast<int>(size.x), bottom = top + static_cast<int>(size.y);
  const int strip = top + static_cast<int>(font + 6.0f);  // the legend's strip (viz/line_plot.cpp)

  // The legend: one swatch per series in the strip, nothing else of the series' colours there.
  int saw_in_strip = 0, flat_in_strip = 0, saw_just_below = 0;
  for (int y = top; y < strip; ++y)
    for (int x = left; x < right; ++x) {
      saw_in_strip += yellowish(x, y);
      flat_in_strip += cyanish(x, y);
    }
  CHECK(saw_in_strip >= 64);  // a 10x10 swatch, its edges blended
  CHECK(saw_in_strip <= 110);
  CHECK(flat_in_strip >= 64);
  CHECK(flat_in_strip <= 110);
  // The data: the sawtooth's peaks reach just under the strip, never into it.
  for (int y = strip; y < strip + 20; ++y)
    for (int x = left; x < right; ++x) saw_just_below += yellowish(x, y);
  CHECK(saw_just_below > 20);

  // The step axis: labels in the band along the plot's bottom edge, each several pixels wide (a
  // grid line is one), brighter than the plot's background.
  const int band_top = bottom - 4 - static_cast<int>(font * 0.85f), band_bottom = bottom - 4;
  const int bg = static_cast<int>((background.x + background.y + background.z) * 255.0f);
  std::vector<bool> inked(static_cast<size_t>(right - left), false);
  for (int x = left; x < right; ++x)
    for (int y = band_top; y < band_bottom; ++y) {
      const unsigned char* p = px.at(x, y);
      if (p[0] + p[1] + p[2] > bg + 150 && !yellowish(x, y) && !cyanish(x, y))
        inked[static_cast<size_t>(x - left)] = true;
    }
  int labels = 0;
  for (size_t x = 0; x < inked.size();) {
    size_t end = x;
    while (end < inked.size() && inked[end]) ++end;
    if (end - x >= 4) ++labels;
    x = end == x ? x + 1 : end;
  }
  CHECK(labels >= 3);  // 0, 200, 400, … over 600 pixels
}
