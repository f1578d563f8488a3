// The colormaps that colour every heatmap: ends, centre, ordering and non-finite values.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "viz/colormap.h"

using memscope::viz::Colormap;
using memscope::viz::ColormapKind;
using memscope::viz::Rgba8;

namespace {
// Rec. 709 luma, enough to check that a map runs dark → light.
double luma(const Rgba8& c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }
}  // namespace

TEST_CASE("RdBu is blue below zero, near-white at zero and red above", "[viz]") {
  const Colormap& rdbu = memscope::viz::colormap(ColormapKind::RdBu);
  const Rgba8 low = rdbu.map(-1.0f, -1.0f, 1.0f), mid = rdbu.map(0.0f, -1.0f, 1.0f), high = rdbu.map(1.0f, -1.0f, 1.0f);
  CHECK(low.b > low.r);
  CHECK(high.r > high.b);
  CHECK(mid.r > 240);
  CHECK(mid.g > 240);
  CHECK(mid.b > 240);
  // Symmetric: equal distances from zero are equally dark on both sides.
  CHECK(std::abs(luma(rdbu.map(-0.5f, -1, 1)) - luma(rdbu.map(0.5f, -1, 1))) < 40.0);
}

TEST_CASE("viridis gets lighter monotonically from low to high", "[viz]") {
  const Colormap& viridis = memscope::viz::colormap(ColormapKind::Viridis);
  double previous = -1.0;
  for (int i = 0; i <= 16; ++i) {
    const double y = luma(viridis.at(static_cast<float>(i) / 16.0f));
    CHECK(y > previous);
    previous = y;
  }
}

TEST_CASE("values outside the range clamp, non-finite values get colours of their own", "[viz]") {
  for (auto kind : {ColormapKind::RdBu, ColormapKind::Viridis}) {
    const Colormap& map = memscope::viz::colormap(kind);
    CHECK(map.map(5.0f, 0.0f, 1.0f) == map.at(1.0f));
    CHECK(map.map(-5.0f, 0.0f, 1.0f) == map.at(0.0f));
    CHECK(map.map(std::numeric_limits<float>::quiet_NaN(), 0, 1) == Colormap::nan_color());
    CHECK(map.map(std::numeric_limits<float>::infinity(), 0, 1) == Colormap::inf_color());
    CHECK(map.map(-std::numeric_limits<float>::infinity(), 0, 1) == Colormap::inf_color());
    for (const Rgba8& entry : map.table()) {
      CHECK_FALSE(entry == Colormap::nan_color());
      CHECK_FALSE(entry == Colormap::inf_color());
    }
  }
}

TEST_CASE("a degenerate range maps to the centre of the map", "[viz]") {
  const Colormap& rdbu = memscope::viz::colormap(ColormapKind::RdBu);
  CHECK(rdbu.map(3.0f, 3.0f, 3.0f) == rdbu.at(0.5f));
}
