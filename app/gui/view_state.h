// What the GUI remembers between frames. The GUI owns only view state (DESIGN principle 2):
// the model, its data and its history belong to the engine.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace memscope::app {

struct ViewState {
  bool show_help = false;        // the `?` overlay
  std::string device_line;       // e.g. "cpu (LibTorch 1.13.0, 2 threads)"
  std::string screenshot_request;  // set by F12; the main loop saves after rendering
  std::string notice;            // one-line message at the bottom (screenshot saved, …)
  std::string preset_name;       // the preset opened at start (--preset, default demo-mqar)
  std::string preset_description;
  std::vector<std::pair<std::string, std::string>> preset_summary;  // (what, value) lines
};

}  // namespace memscope::app
