// How an event looks wherever it is drawn (the scrubber, plot markers, the events list), so a
// spike is the same orange everywhere.
#pragma once
#include <imgui.h>

#include "model/probe/event.h"

namespace memscope::app {

inline ImU32 event_color(model::EventKind kind) {
  switch (kind) {
    case model::EventKind::Spike: return IM_COL32(255, 170, 40, 255);
    case model::EventKind::NonFinite: return IM_COL32(255, 0, 255, 255);  // the heatmaps' NaN colour
    case model::EventKind::NsError: return IM_COL32(240, 220, 80, 255);
    case model::EventKind::NormGrowth: return IM_COL32(255, 120, 90, 255);
    case model::EventKind::Command: return IM_COL32(140, 150, 170, 255);
    case model::EventKind::Breakpoint: return IM_COL32(80, 200, 255, 255);
    case model::EventKind::Error: return IM_COL32(255, 60, 60, 255);
    case model::EventKind::Notice:
      return IM_COL32(120, 200, 140, 255);
  }
  return IM_COL32(200, 200, 200, 255);
}

}  // namespace memscope::app
