// The input token stream as one horizontally scrolling row of cells, each coloured by the token's
// surprise, with the current step's cell outlined (DESIGN "GUI" → Tokens).
#pragma once
#include <imgui.h>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "viz/colormap.h"
#include "viz/value_range.h"

namespace memscope::viz {

struct TokenCell {
  std::string text;  // as the app wants it shown, e.g. "k12" or "'a'"
  float surprise;    // NaN when there is none (yet)
  long long step;
  Rgba8 role{0, 0, 0, 0};  // the token's role in its task (key, value, query), a bar along the top; alpha 0: none
};

// The surprise scale beside the strip: a viridis bar from lo to hi with both values written.
void draw_surprise_scale(ValueRange range, float width);

// A token with no surprise is grey: viridis holds no grey, so it can never read as a value.
constexpr Rgba8 no_surprise_color() { return {96, 96, 96, 255}; }

// The text a cell shows: control bytes become escapes ("\n", "\x01") so every token is visible
// and stays on one line.
std::string readable_token_text(std::string_view text);

// Draws at the cursor, filling size (a scrollbar takes the bottom strip). Surprise is coloured with
// viridis over surprise_range. The row centres on the cell whose step is current_step, except
// while the mouse is over it, so a token being read stays put as the engine runs. Hovering a cell
// shows its text, step and surprise, then calls tooltip(index) (when set) inside the same tooltip.
// cell_width <= 0 fits five characters. Cells are placed at float pixel offsets, so pass the
// recent stream (up to ~100k tokens), not a whole corpus. Returns the index of the cell clicked
// this frame, else -1.
std::ptrdiff_t draw_token_strip(const char* id, const std::vector<TokenCell>& cells, long long current_step,
                                ValueRange surprise_range, const std::function<void(std::size_t)>& tooltip,
                                ImVec2 size, float cell_width = 0.0f);

}  // namespace memscope::viz
