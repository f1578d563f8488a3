// Keyboard shortcuts (DESIGN "GUI" → Keys): their handling, and the `?` overlay that lists them
// (keys.cpp keeps the two side by side).
#pragma once

namespace memscope::app {

class GuiApp;

// Reads this frame's key presses and acts on them. Returns true to quit.
bool handle_keys(GuiApp& app);

// The `?` overlay listing every shortcut; `open` is cleared when the user closes it.
void draw_help_overlay(bool& open);

}  // namespace memscope::app
