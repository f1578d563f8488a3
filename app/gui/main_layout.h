// The main window's layout (DESIGN "GUI"): menu and transport on top, knobs, events and
// breakpoints left, memory centre, plots right, tokens bottom, and a status line.
#pragma once

namespace memscope::app {

class GuiApp;

// Draws one frame of the whole window into the current ImGui frame.
void draw_main_layout(GuiApp& app);

}  // namespace memscope::app
