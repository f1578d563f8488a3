// The token strip checked by pixels: each cell's background is viridis of its surprise (grey when
// it has none), the current cell is outlined, long text stays inside its cell, and a long stream
// scrolls to the current token and reports hover and clicks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gui/widget_frame.h"
#include "viz/theme.h"
#include "viz/token_strip.h"

using namespace memscope::viz;
using namespace memscope::test;

namespace {

unsigned rgb_of(const Rgba8& c) { return (c.r << 16) | (c.g << 8) | c.b; }

constexpr float kCell = 60.0f;   // cell width asked for
constexpr float kPitch = 62.0f;  // cell plus the gap
const ImVec2 kSize{900.0f, 54.0f};

}  // namespace

TEST_CASE("token cells are viridis of their surprise, grey without one, and the current cell is outlined", "[gui]") {
  auto owned = open_test_window(1000, 240);
  AppWindow& window = *owned;
  const std::vector<TokenCell> cells = {
      {"k12", 0.0f, 10}, {"'a'", 0.25f, 11}, {"v3", 0.5f, 12},  {"\n", 0.75f, 13},
      {"q", 1.0f, 14},   {"?", NAN, 15},     {"x", 2.0f, 16},   {"y", -1.0f, 17},
  };
  const ValueRange range{0.0f, 1.0f};
  ImVec2 origin{};
  for (int frame = 0; frame < 3; ++frame)
    widget_frame(window, [&] {
      origin = pixel_cursor();
      CHECK(draw_token_strip("tokens", cells, 12, range, nullptr, kSize, kCell) == -1);
    });
  const auto image = capture(window, "token-strip");
  window.present();

  const Colormap& viridis = colormap(ColormapKind::Viridis);
  const unsigned accent = rgb_of(ImGui::ColorConvertFloat4ToU32(colors::accent()));
  const int mid = static_cast<int>(origin.y + 20);
  for (std::size_t i = 0; i < cells.size(); ++i) {
    INFO("cell " << i);
    const int left = static_cast<int>(origin.x + i * kPitch);
    // Near the top-left corner, clear of the outline and of the centred text.
    const Rgba8 fill = std::isnan(cells[i].surprise) ? no_surprise_color() : viridis.map(cells[i].surprise, 0.0f, 1.0f);
    CHECK(rgb_close(image.pixel(left + 4, static_cast<int>(origin.y) + 4), rgb_of(fill)));
    // The outline covers the two outermost columns of the current cell (step 12) only.
    const unsigned edge = image.pixel(left, mid), inner_edge = image.pixel(left + 1, mid);
    if (i == 2) {
      CHECK(rgb_close(edge, accent));
      CHECK(rgb_close(inner_edge, accent));
      CHECK(rgb_close(image.pixel(left + 59, mid), accent));
    } else {
      CHECK(rgb_close(edge, rgb_of(fill)));
    }
  }
  // Out-of-range surprise clamps to the ends of the map, never to the missing-surprise grey.
  CHECK(rgb_close(image.pixel(static_cast<int>(origin.x + 6 * kPitch) + 4, static_cast<int>(origin.y) + 4), rgb_of(viridis.at(1.0f))));
  CHECK(rgb_close(image.pixel(static_cast<int>(origin.x + 7 * kPitch) + 4, static_cast<int>(origin.y) + 4), rgb_of(viridis.at(0.0f))));
}

TEST_CASE("a long token's text is clipped to its own cell", "[gui]") {
  auto owned = open_test_window(1000, 240);
  AppWindow& window = *owned;
  const std::vector<TokenCell> cells = {
      {"a-very-long-token-that-cannot-fit-in-one-cell", 0.0f, 0}, {"", 0.0f, 1}, {"", 0.0f, 2}};
  ImVec2 origin{};
  for (int frame = 0; frame < 3; ++frame)
    widget_frame(window, [&] {
      origin = pixel_cursor();
      draw_token_strip("tokens", cells, 99, {0.0f, 1.0f}, nullptr, kSize, kCell);
    });
  const auto image = capture(window, "token-clip");
  window.present();

  const unsigned fill = rgb_of(colormap(ColormapKind::Viridis).at(0.0f));
  const unsigned gap = rgb_of(ImGui::GetColorU32(ImGuiCol_ChildBg));
  const int top = static_cast<int>(origin.y), bottom = static_cast<int>(origin.y + kSize.y - ImGui::GetStyle().ScrollbarSize);
  int text_pixels = 0, leaked = 0;
  for (int y = top; y < bottom; ++y) {
    for (int x = static_cast<int>(origin.x); x < static_cast<int>(origin.x + kCell); ++x)
      text_pixels += !rgb_close(image.pixel(x, y), fill);
    // The gap and the next (empty) cell are untouched by the first cell's text.
    for (int x = static_cast<int>(origin.x + kCell); x < static_cast<int>(origin.x + kPitch); ++x)
      leaked += !rgb_close(image.pixel(x, y), gap);
    for (int x = static_cast<int>(origin.x + kPitch); x < static_cast<int>(origin.x + kPitch + kCell); ++x)
      leaked += !rgb_close(image.pixel(x, y), fill);
  }
  CHECK(text_pixels > 20);  // the text is drawn, as far as the cell goes
  CHECK(leaked == 0);
}

TEST_CASE("a long token stream centres on the current token and reports hover and clicks", "[gui]") {
  auto owned = open_test_window(1000, 240);
  AppWindow& window = *owned;
  std::vector<TokenCell> cells;
  for (int i = 0; i < 10'000; ++i) cells.push_back({"t" + std::to_string(i), (i % 10) / 9.0f, 1000 + i});
  ImVec2 origin{};
  std::ptrdiff_t clicked = -1;
  std::vector<std::size_t> tooltips;
  auto frame = [&](TestMouse mouse) {
    widget_frame(
        window,
        [&] {
          origin = pixel_cursor();
          clicked = draw_token_strip("tokens", cells, 6000, {0.0f, 1.0f},
                                     [&](std::size_t i) { tooltips.push_back(i); }, kSize, kCell);
        },
        mouse);
  };
  for (int i = 0; i < 3; ++i) frame({});
  const auto image = capture(window, "token-scroll");
  window.present();

  // Step 6000 is cell 5000, centred in the strip's width.
  const unsigned accent = rgb_of(ImGui::ColorConvertFloat4ToU32(colors::accent()));
  const int left = static_cast<int>(origin.x + (kSize.x - kCell) / 2);
  CHECK(rgb_close(image.pixel(left, static_cast<int>(origin.y) + 20), accent));
  CHECK(rgb_close(image.pixel(left + static_cast<int>(kCell) - 1, static_cast<int>(origin.y) + 20), accent));
  CHECK(tooltips.empty());

  // Hover the cell right of the current one: the tooltip callback gets its index, and a click
  // returns it. The strip holds still while hovered.
  const TestMouse over_next{{left + kPitch + 10.0f, origin.y + 20.0f}, false};
  frame(over_next);
  window.present();
  frame(over_next);
  window.present();
  REQUIRE(!tooltips.empty());
  CHECK(tooltips.back() == 5001);
  CHECK(clicked == -1);
  frame({over_next.pos, true});
  window.present();
  CHECK(clicked == 5001);
  frame({over_next.pos, true});  // held: a click is reported once
  window.present();
  CHECK(clicked == -1);
}
