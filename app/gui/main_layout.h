// The main window's layout (DESIGN "GUI"): transport on top, knobs left, memory centre,
// plots right, tokens bottom, and a status line.
#pragma once
#include "app/gui/view_state.h"

namespace memscope::app {

// Draws one frame of the whole window into the current ImGui frame.
void draw_main_layout(ViewState& view);

}  // namespace memscope::app
