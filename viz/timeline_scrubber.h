// A horizontal step axis [first, last] with the current step as a cursor and events as coloured
// ticks; hover names the step and nearby events, click or drag seeks (DESIGN "GUI" → Transport).
#pragma once
#include <imgui.h>

#include <vector>

namespace memscope::viz {

struct TimelineTick {
  double step;
  ImU32 color;
  const char* label;  // shown on hover
  int severity = 0;   // wins a shared pixel column over lower severities (e.g. 0 info, 1 spike, 2 NaN)
};

// Draws at the cursor, filling size. Step s sits at pixel column round((s - first) / (last - first)
// × (width - 1)) from the left edge, so first and last are the edge columns. At most one tick is
// drawn per pixel column (one quad each, however many events): the highest severity wins, and
// among equal severities the one latest in `ticks`, so appending in step order shows the newest.
// Returns the whole step to seek to while the timeline is clicked or dragged, else NaN.
double draw_timeline_scrubber(const char* id, double first, double last, double current,
                              const std::vector<TimelineTick>& ticks, ImVec2 size);

}  // namespace memscope::viz
