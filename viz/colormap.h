// Colormaps for heatmaps and token strips: a 256-entry RGBA lookup table per map, so a matrix
// is coloured on the CPU in one pass and uploaded as one RGBA texture (DESIGN "GUI").
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace memscope::viz {

struct Rgba8 {
  std::uint8_t r = 0, g = 0, b = 0, a = 255;
  bool operator==(const Rgba8& o) const { return r == o.r && g == o.g && b == o.b && a == o.a; }
};

enum class ColormapKind {
  RdBu,     // diverging: negative blue, zero white, positive red (memory matrices, ΔM)
  Viridis,  // sequential, perceptually uniform (surprise, norms)
};

class Colormap {
 public:
  explicit Colormap(ColormapKind kind);

  // Colour at position t of the map; t outside [0, 1] is clamped, NaN gives nan_color().
  Rgba8 at(float t) const;

  // Value → colour over [lo, hi] (a diverging map wants a symmetric range); ±Inf → inf_color().
  Rgba8 map(float value, float lo, float hi) const;

  // Non-finite values must never look like data: NaN is magenta and ±Inf bright green,
  // colours that neither map contains.
  static constexpr Rgba8 nan_color() { return {255, 0, 255, 255}; }
  static constexpr Rgba8 inf_color() { return {0, 255, 0, 255}; }

  ColormapKind kind() const { return kind_; }
  std::string_view name() const;
  const std::array<Rgba8, 256>& table() const { return table_; }

 private:
  ColormapKind kind_;
  std::array<Rgba8, 256> table_{};
};

// Shared instances; building a table costs a few microseconds, but panels ask every frame.
const Colormap& colormap(ColormapKind kind);

}  // namespace memscope::viz
