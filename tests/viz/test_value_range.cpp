// Heatmap scale modes and colouring, on plain floats.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "viz/heatmap.h"
#include "viz/value_range.h"

using namespace memscope::viz;

TEST_CASE("scale modes: symmetric centres zero, auto spans the finite values, locked is fixed", "[viz]") {
  std::vector<float> v{-0.5f, 2.0f, NAN, INFINITY, 1.0f};
  auto stats = finite_stats(v.data(), v.size());
  CHECK(stats.finite == 3);
  CHECK(stats.nan == 1);
  CHECK(stats.inf == 1);
  auto sym = choose_range(stats, ScaleMode::Symmetric);
  CHECK(sym.lo == -2.0f);
  CHECK(sym.hi == 2.0f);
  auto autor = choose_range(stats, ScaleMode::Auto);
  CHECK(autor.lo == -0.5f);
  CHECK(autor.hi == 2.0f);
  auto locked = choose_range(stats, ScaleMode::Locked, {-7.0f, 7.0f});
  CHECK(locked.lo == -7.0f);
  CHECK(locked.hi == 7.0f);
}

TEST_CASE("an all-NaN matrix still gets a usable range", "[viz]") {
  std::vector<float> v{NAN, NAN};
  auto stats = finite_stats(v.data(), v.size());
  auto sym = choose_range(stats, ScaleMode::Symmetric);
  CHECK(sym.hi > sym.lo);
  auto autor = choose_range(stats, ScaleMode::Auto);
  CHECK(autor.hi > autor.lo);
}

TEST_CASE("colorize maps each value through the colormap, NaN distinctly", "[viz]") {
  std::vector<float> v{-1.0f, 0.0f, 1.0f, NAN};
  std::vector<Rgba8> px(v.size());
  const Colormap& map = colormap(ColormapKind::RdBu);
  colorize(v.data(), v.size(), map, {-1.0f, 1.0f}, px.data());
  CHECK(px[0] == map.at(0.0f));
  CHECK(px[1] == map.at(0.5f));
  CHECK(px[2] == map.at(1.0f));
  CHECK(px[3] == Colormap::nan_color());
}
