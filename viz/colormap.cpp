#include "viz/colormap.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace memscope::viz {
namespace {

struct Anchor {
  std::uint8_t r, g, b;
};

// ColorBrewer RdBu (11 classes), reversed so that index 0 (the low end) is dark blue.
const std::vector<Anchor> kRdBu = {{5, 48, 97},    {33, 102, 172},  {67, 147, 195}, {146, 197, 222},
                                   {209, 229, 240}, {247, 247, 247}, {253, 219, 199}, {244, 165, 130},
                                   {214, 96, 77},   {178, 24, 43},   {103, 0, 31}};
// Matplotlib's viridis sampled at 10 evenly spaced points.
const std::vector<Anchor> kViridis = {{68, 1, 84},    {72, 40, 120},  {62, 73, 137},  {49, 104, 142},
                                      {38, 130, 142}, {31, 158, 137}, {53, 183, 121}, {110, 206, 88},
                                      {181, 222, 43}, {253, 231, 37}};

std::array<Rgba8, 256> build_table(const std::vector<Anchor>& anchors) {
  std::array<Rgba8, 256> table{};
  const int segments = static_cast<int>(anchors.size()) - 1;
  for (int i = 0; i < 256; ++i) {
    const float x = static_cast<float>(i) / 255.0f * static_cast<float>(segments);
    const int k = std::min(static_cast<int>(x), segments - 1);
    const float f = x - static_cast<float>(k);
    auto mix = [f](std::uint8_t a, std::uint8_t b) {
      return static_cast<std::uint8_t>(std::lround(static_cast<float>(a) * (1.0f - f) + static_cast<float>(b) * f));
    };
    table[i] = {mix(anchors[k].r, anchors[k + 1].r), mix(anchors[k].g, anchors[k + 1].g),
                mix(anchors[k].b, anchors[k + 1].b), 255};
  }
  return table;
}

}  // namespace

Colormap::Colormap(ColormapKind kind)
    : kind_(kind), table_(build_table(kind == ColormapKind::RdBu ? kRdBu : kViridis)) {}

Rgba8 Colormap::at(float t) const {
  if (std::isnan(t)) return nan_color();
  const float clamped = std::clamp(t, 0.0f, 1.0f);
  return table_[static_cast<std::size_t>(std::lround(clamped * 255.0f))];
}

Rgba8 Colormap::map(float value, float lo, float hi) const {
  if (std::isnan(value)) return nan_color();
  if (std::isinf(value)) return inf_color();
  const float span = hi - lo;
  return at(span > 0.0f ? (value - lo) / span : 0.5f);
}

std::string_view Colormap::name() const { return kind_ == ColormapKind::RdBu ? "RdBu" : "viridis"; }

const Colormap& colormap(ColormapKind kind) {
  static const Colormap rdbu(ColormapKind::RdBu);
  static const Colormap viridis(ColormapKind::Viridis);
  return kind == ColormapKind::RdBu ? rdbu : viridis;
}

}  // namespace memscope::viz
