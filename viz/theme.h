// memscope's look: one dark theme, set once, and the few named colours panels share.
#pragma once

struct ImVec4;

namespace memscope::viz {

void apply_theme();

namespace colors {
ImVec4 accent();    // headings, the active step
ImVec4 muted();     // secondary text
ImVec4 warning();   // breakpoints, spikes
ImVec4 error();     // NaN, engine errors
}  // namespace colors

}  // namespace memscope::viz
