// The memory panel's heatmaps, kept between frames: one texture per shown matrix, uploaded again
// only when the frame it shows or its colour scale changes (an idle or paused window uploads
// nothing).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "app/gui/gui_app.h"
#include "model/probe/frame.h"
#include "viz/heatmap.h"

namespace memscope::app {

struct GuiApp::Textures {
  struct Entry {
    viz::Heatmap heatmap;
    const model::Frame* frame = nullptr;  // with `step`: what is uploaded
    int64_t step = -1;
    std::string scale;  // the scale options it was coloured with
  };
  std::map<std::string, Entry> entries;  // by "run/timeline/layer/head/weight/tensor" or a view's id

  // The heatmap of `m` from `frame`, coloured with the view's scale; uploads only when stale.
  viz::Heatmap& heatmap(const std::string& id, const model::Frame& frame, const model::MatrixSnapshot& m,
                        const ViewState& view, viz::ColormapKind colormap = viz::ColormapKind::RdBu);
  // A heatmap of arbitrary values (per-feature gates over tokens); uploads when `version` changes.
  // `row_labels` name the rows in the hover readout.
  viz::Heatmap& heatmap(const std::string& id, const float* values, int rows, int cols, int64_t version,
                        viz::ColormapKind colormap, viz::ScaleMode mode, const std::vector<std::string>& row_labels = {});
};

}  // namespace memscope::app
