// memscope-cli presets: every shipped preset with its one-line description (the GUI's Presets
// browser for a terminal), or one JSON object per preset with --json.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "model/config/preset.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

void run_presets(bool json) {
  using namespace memscope::model;
  size_t width = 0;
  const auto names = list_presets();
  for (const auto& n : names) width = std::max(width, n.size());
  for (const auto& name : names) {
    std::string description, error;
    size_t compare = 0;
    try {
      const Preset p = load_preset(name);
      description = p.description;
      compare = p.compare.size();
    } catch (const std::exception& e) {  // listed with its reason rather than left out
      error = one_line(e.what());
    }
    if (json) {
      nlohmann::json j{{"name", name}, {"description", description}, {"compare_runs", compare}};
      if (!error.empty()) j["error"] = error;
      std::cout << j.dump() << '\n';
    } else {
      std::cout << name << std::string(width + 2 - name.size(), ' ') << (error.empty() ? description : "error: " + error);
      if (compare > 0) std::cout << " [+" << compare << " compare run" << (compare > 1 ? "s" : "") << "]";
      std::cout << '\n';
    }
  }
}

}  // namespace

void register_presets(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("presets", "List the shipped presets (assets/presets) with their descriptions");
  cmd->add_flag("--json", *json, "One JSON object per preset: name, description, compare_runs");
  cmd->callback([json] { run_presets(*json); });
}

}  // namespace memscope::app
