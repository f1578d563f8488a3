// The timeline scrubber checked by pixels: each event tick in its colour at its step's column,
// one tick per column however many events, the cursor at the current step, and seeking by mouse.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "gui/widget_frame.h"
#include "viz/theme.h"
#include "viz/timeline_scrubber.h"

using namespace memscope::viz;
using namespace memscope::test;

namespace {

// 1001 pixels for steps 0..1000: step s is pixel column s from the scrubber's left edge.
constexpr double kFirst = 0.0, kLast = 1000.0;
const ImVec2 kSize{1001.0f, 24.0f};

}  // namespace

TEST_CASE("timeline ticks land in their colour at their step's pixel column, the cursor at the current step", "[gui]") {
  auto owned = open_test_window(1100, 240);
  AppWindow& window = *owned;
  const ImU32 red = IM_COL32(230, 40, 40, 255), green = IM_COL32(40, 200, 60, 255), blue = IM_COL32(40, 90, 230, 255);
  const ImU32 yellow = IM_COL32(240, 220, 30, 255), orange = IM_COL32(250, 140, 20, 255), purple = IM_COL32(150, 60, 200, 255);
  const std::vector<TimelineTick> ticks = {
      {100, red, "spike"},
      {250, green, "checkpoint"},
      {600, blue, "knob changed"},
      {399.8, red, "NaN", 2},  // shares column 400 with a later, milder tick: severity wins
      {400.2, yellow, "note", 0},
      {800, orange, "first"},  // equal severities in one column: the later tick wins
      {800, purple, "second"},
      {-5, green, "before the range"},
      {1005, green, "after the range"},
  };
  ImVec2 origin{};
  for (int frame = 0; frame < 3; ++frame)
    widget_frame(window, [&] {
      origin = pixel_cursor();
      CHECK(std::isnan(draw_timeline_scrubber("t", kFirst, kLast, 500.0, ticks, kSize)));
    });
  const auto image = capture(window, "timeline");
  window.present();

  const unsigned background = rgb_of(ImGui::GetColorU32(ImGuiCol_FrameBg));
  const unsigned accent = rgb_of(ImGui::ColorConvertFloat4ToU32(colors::accent()));
  const int mid = static_cast<int>(origin.y + kSize.y / 2);
  auto at = [&](int column) { return image.pixel(static_cast<int>(origin.x) + column, mid); };

  CHECK(rgb_close(at(100), rgb_of(red)));
  CHECK(rgb_close(at(250), rgb_of(green)));
  CHECK(rgb_close(at(600), rgb_of(blue)));
  CHECK(rgb_close(at(400), rgb_of(red)));
  CHECK(rgb_close(at(800), rgb_of(purple)));
  // One pixel wide: the neighbouring columns are background.
  for (int column : {99, 101, 249, 251, 399, 401, 599, 601, 799, 801}) {
    INFO("column " << column);
    CHECK(rgb_close(at(column), background));
  }
  // Ticks outside [first, last] are not drawn at the edges.
  CHECK(rgb_close(at(0), background));
  CHECK(rgb_close(at(1000), background));
  // The cursor: three columns centred on step 500, top to bottom.
  for (int column : {499, 500, 501}) CHECK(rgb_close(at(column), accent));
  CHECK(rgb_close(image.pixel(static_cast<int>(origin.x) + 500, static_cast<int>(origin.y)), accent));
  const unsigned halo = rgb_of(ImGui::GetColorU32(ImGuiCol_WindowBg));
  CHECK(rgb_close(at(498), halo));
  CHECK(rgb_close(at(502), halo));
  CHECK(rgb_close(at(497), background));
  CHECK(rgb_close(at(503), background));
}

TEST_CASE("a hundred thousand timeline events draw as at most one quad per pixel column", "[gui]") {
  auto owned = open_test_window(1100, 240);
  AppWindow& window = *owned;
  std::vector<TimelineTick> ticks;
  for (int i = 0; i < 100'000; ++i) ticks.push_back({i * 0.01, IM_COL32(40, 200, 60, 255), "event"});
  ticks.push_back({555.0, IM_COL32(230, 40, 40, 255), "NaN", 2});  // one severe event among them

  int vertices = 0;
  ImVec2 origin{};
  for (int frame = 0; frame < 2; ++frame)
    widget_frame(window, [&] {
      origin = pixel_cursor();
      const int before = ImGui::GetWindowDrawList()->VtxBuffer.Size;
      draw_timeline_scrubber("t", kFirst, kLast, 0.0, ticks, kSize);
      vertices = ImGui::GetWindowDrawList()->VtxBuffer.Size - before;
    });
  const auto image = capture(window, "timeline-many");
  window.present();

  // One 4-vertex quad per column at most, plus the background and the cursor (three quads).
  CHECK(vertices <= 4 * static_cast<int>(kSize.x) + 12);
  const int mid = static_cast<int>(origin.y + kSize.y / 2);
  CHECK(rgb_close(image.pixel(static_cast<int>(origin.x) + 555, mid), 0xe62828));
  CHECK(rgb_close(image.pixel(static_cast<int>(origin.x) + 554, mid), 0x28c83c));
}

TEST_CASE("clicking or dragging the timeline seeks to the step under the mouse, hovering does not", "[gui]") {
  auto owned = open_test_window(1100, 240);
  AppWindow& window = *owned;
  ImVec2 origin{};
  double seek = 0.0;
  auto frame = [&](float column, bool down) {
    widget_frame(
        window,
        [&] {
          origin = pixel_cursor();
          seek = draw_timeline_scrubber("t", 2000.0, 3000.0, 2500.0, {}, kSize);
        },
        TestMouse{{origin.x + column + 0.5f, origin.y + kSize.y / 2}, down});
    window.present();
  };
  frame(300, false);  // lays the window out, so later frames know where the scrubber is
  frame(300, false);
  CHECK(std::isnan(seek));
  frame(300, true);
  CHECK(seek == 2300.0);
  frame(700, true);
  CHECK(seek == 2700.0);
  frame(700, true);  // held still: nothing new to seek to
  CHECK(std::isnan(seek));
  frame(2000, true);  // dragged past the end: clamped to the last step
  CHECK(seek == 3000.0);
  frame(2000, false);
  CHECK(std::isnan(seek));
}
