// The panels of the main window (DESIGN "GUI"), each a function of the app's state drawn into the
// current ImGui window. One file per panel; main_layout.cpp places them.
#pragma once

namespace memscope::app {

class GuiApp;

void draw_menu_bar(GuiApp& app);        // File (open, save, export, screenshot), View, Help
void draw_transport(GuiApp& app);       // run/pause, step 1/10/100, speed, mode, record, rewind, fork
void draw_error_banner(GuiApp& app);    // the last engine error, with its step, until dismissed
void draw_knobs_panel(GuiApp& app);     // generated from the knob registry
void draw_reset_buttons(GuiApp& app);   // reset momentum / memory per layer and head, or all
void draw_breakpoints_panel(GuiApp& app);
void draw_events_panel(GuiApp& app);    // click an event to seek to it
void draw_memory_panel(GuiApp& app);    // layers × {M, S, ΔM}, head selector, click to enlarge
void draw_enlarged_matrix(GuiApp& app); // the enlarged matrix with its singular-value spectrum
void draw_plots_panel(GuiApp& app);     // loss, surprise, erank, NS error, gates, norms
void draw_hope_panel(GuiApp& app);      // CMS norms and ticks, target errors, per-feature gates
void draw_modules_panel(GuiApp& app);   // per-module outer gradient norms and update ratios of a training step
void draw_compare_view(GuiApp& app);    // every run and timeline side by side, plots overlaid
void draw_tokens_panel(GuiApp& app);    // token strip and the timeline scrubber
void draw_presets_browser(GuiApp& app); // each preset with its one-line description
void draw_intro_overlay(GuiApp& app);   // the first-run overlay: three lines on what to watch

}  // namespace memscope::app
