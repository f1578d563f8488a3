// Keyboard shortcuts (DESIGN "GUI" → Keys). One table drives both the handling and the `?`
// overlay, so the help can never disagree with what the keys do.
#pragma once
#include "app/gui/view_state.h"

namespace memscope::app {

// Reads this frame's key presses and updates the view state. Returns true to quit.
bool handle_keys(ViewState& view);

// The `?` overlay listing every shortcut; `open` is cleared when the user closes it.
void draw_help_overlay(bool& open);

}  // namespace memscope::app
