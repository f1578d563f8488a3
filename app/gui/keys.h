// Keyboard shortcuts (DESIGN "GUI" → Keys). One table drives both the handling and the `?`
// overlay, so the help can never disagree with what the keys do.
#pragma once

namespace memscope::app {

class GuiApp;

// Reads this frame's key presses and acts on them. Returns true to quit.
bool handle_keys(GuiApp& app);

// The `?` overlay listing every shortcut; `open` is cleared when the user closes it.
void draw_help_overlay(bool& open);

}  // namespace memscope::app
