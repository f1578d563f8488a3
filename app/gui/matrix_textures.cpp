#include "app/gui/matrix_textures.h"

namespace memscope::app {

viz::Heatmap& GuiApp::Textures::heatmap(const std::string& id, const model::Frame& frame,
                                        const model::MatrixSnapshot& m, const ViewState& view,
                                        viz::ColormapKind colormap) {
  Entry& e = entries[id];
  viz::HeatmapOptions options;
  options.colormap = colormap;
  options.scale = view.lock_scale ? viz::ScaleMode::Locked
                                  : (view.symmetric_scale ? viz::ScaleMode::Symmetric : viz::ScaleMode::Auto);
  options.locked = {-view.locked_range, view.locked_range};
  const std::string scale = std::to_string(static_cast<int>(options.scale)) + "/" + std::to_string(view.locked_range);
  if (e.frame != &frame || e.step != frame.step || e.scale != scale) {
    e.heatmap.set_data(m.values.data(), m.rows, m.cols, options);
    e.frame = &frame;
    e.step = frame.step;
    e.scale = scale;
  }
  return e.heatmap;
}

viz::Heatmap& GuiApp::Textures::heatmap(const std::string& id, const float* values, int rows, int cols,
                                        int64_t version, viz::ColormapKind colormap, viz::ScaleMode mode,
                                        const std::vector<std::string>& row_labels) {
  Entry& e = entries[id];
  const std::string scale = std::to_string(static_cast<int>(mode)) + "/" + std::to_string(rows) + "x" + std::to_string(cols);
  if (e.step != version || e.scale != scale) {
    viz::HeatmapOptions options;
    options.colormap = colormap;
    options.scale = mode;
    options.row_labels = row_labels;
    e.heatmap.set_data(values, rows, cols, options);
    e.frame = nullptr;
    e.step = version;
    e.scale = scale;
  }
  return e.heatmap;
}

}  // namespace memscope::app
