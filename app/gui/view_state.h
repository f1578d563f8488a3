// What the GUI remembers between frames. The GUI owns only view state (DESIGN principle 2): the
// model, its data and its history belong to the sources (app/gui/run.h).
#pragma once
#include <functional>
#include <cstdint>
#include <map>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "app/gui/path_browser.h"
#include "viz/line_plot.h"

namespace memscope::app {

struct MatrixKey {
  int layer = 0, head = 0;
  std::string weight, tensor;  // "M" / "W1" / "W2", and "M" / "S" / "dM"
  bool operator<(const MatrixKey& o) const {
    return std::tie(layer, head, weight, tensor) < std::tie(o.layer, o.head, o.weight, o.tensor);
  }
  bool operator==(const MatrixKey& o) const { return !(*this < o) && !(o < *this); }
};

struct ViewState {
  // Where the view is: following the newest step, or pinned to `cursor` (a click on an event, a
  // token, a plot or the timeline pins it; running or stepping follows again).
  bool follow = true;
  int64_t cursor = 0;
  int timeline = 0;  // the main run's timeline the panels show (forks count from 1)

  int layer = 0, head = 0;          // the layer the plots show, the head the plots and heatmaps show
  int cms_level = 0;                // the CMS level the compare view overlays
  bool has_enlarged = false;        // the click-to-enlarge view
  MatrixKey enlarged;
  int enlarged_run = 0, enlarged_timeline = 0;  // whose matrix (the compare view shows several runs)
  bool symmetric_scale = true;      // false: auto [min, max]
  bool lock_scale = false;          // keep the current range so frames compare by colour
  float locked_range = 1.0f;

  // Transport speed: steps per second while running, 0 = as fast as the engine goes.
  float speed = 0.0f;
  bool playing = false;    // the GUI paces a limited-speed run with Step commands
  double play_clock = 0;   // steps owed to the pacing

  int select_left_tab = -1;    // one-shot: select Events (0), Breakpoints (1) or Resets (2)
  int select_right_tab = -1;   // one-shot: select Plots (0) or HOPE (1)

  bool show_help = false;      // the `?` overlay
  bool show_intro = false;     // the first-run overlay (intro_overlay.cpp)
  std::function<void()> on_intro_dismissed;  // remembers the dismissal (main.cpp)
  bool show_compare = false;   // compare view instead of the single-run plots
  bool show_presets = false;   // the presets browser
  std::string knob_filter;     // the knobs panel's search box
  bool show_unused_knobs = false;  // the knobs panel also lists knobs the model does not read
  bool strip_shows_batch = false;  // train+inspect: the token strip shows the training batch's row, not the probe stream
  std::string breakpoint_text = "spike";
  std::map<std::string, std::string> knob_text;  // edit buffers for string and list knobs

  std::string device_line;         // e.g. "cpu (LibTorch 1.13.0, 2 threads)"
  std::string screenshot_request;  // set by F12; the main loop saves after rendering
  std::string notice;              // one-line message at the bottom (screenshot saved, …)
  std::string banner;              // the engine error on show (dismissable), with its step
  bool banner_is_breakpoint = false;  // "breakpoint hit: …" (amber), not an error (red)
  size_t banner_event = 0;         // events seen when the banner was last raised

  // The path prompt of a File menu action ("open", "compare", "export csv", "export safetensors").
  std::string prompt;
  std::string prompt_path;
  PathListing prompt_listing;         // the folder under the prompt, listed once per path typed
  std::string prompt_listing_of = "\n";  // the prompt_path and kind that listing is of
  std::string fork_sets;  // the transport's fork field: KEY=VALUE, comma separated

  std::map<std::string, viz::PlotView> plots;  // zoom/pan of each plot, by id
};

}  // namespace memscope::app
