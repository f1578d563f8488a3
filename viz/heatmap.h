// A matrix drawn as one texture (never per-cell rectangles: Debian's imgui has 16-bit indices),
// with a colour bar and a hover readout of row, column and value (DESIGN "GUI" → Memory).
#pragma once
#include <imgui.h>

#include <string>
#include <vector>

#include "viz/colormap.h"
#include "viz/value_range.h"

namespace memscope::viz {

struct HeatmapOptions {
  ColormapKind colormap = ColormapKind::RdBu;
  ScaleMode scale = ScaleMode::Symmetric;
  ValueRange locked;        // used when scale == Locked
  bool colorbar = true;
  std::vector<std::string> row_labels;  // named in the hover readout instead of "row N" (module names)
};

// Colours count values into out (RGBA8); NaN and ±Inf get their own colours.
void colorize(const float* values, std::size_t count, const Colormap& map, ValueRange range, Rgba8* out);

class Heatmap {
 public:
  Heatmap() = default;
  ~Heatmap();
  Heatmap(const Heatmap&) = delete;
  Heatmap& operator=(const Heatmap&) = delete;

  // Copies a row-major rows × cols matrix, colours it and uploads the texture.
  void set_data(const float* values, int rows, int cols, const HeatmapOptions& options = {});

  // Draws the matrix filling size (the colour bar takes a strip on the right). Returns true
  // when the matrix was clicked this frame.
  bool draw(const char* id, ImVec2 size);

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  ValueRange range() const { return range_; }
  const FiniteStats& stats() const { return stats_; }

 private:
  void draw_colorbar(ImVec2 top_left, ImVec2 size) const;

  unsigned texture_ = 0;
  int rows_ = 0, cols_ = 0;
  std::vector<float> values_;
  std::vector<Rgba8> pixels_;
  HeatmapOptions options_;
  ValueRange range_;
  FiniteStats stats_;
};

}  // namespace memscope::viz
