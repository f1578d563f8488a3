// memscope-cli knobs: the knob registry as a table or JSON lines (DESIGN principle 5), with the
// defaults, or a preset's values when --preset/--set are given.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "model/config/knobs.h"
#include "model/config/preset.h"

namespace memscope::app {

namespace {

struct KnobsOptions {
  std::string preset;
  std::vector<std::string> sets;
  bool json = false;
};

nlohmann::json to_json(const model::KnobValue& value) {
  return std::visit([](const auto& v) { return nlohmann::json(v); }, value);
}

void run_knobs(const KnobsOptions& o) {
  using namespace memscope::model;
  // With neither option the table shows defaults; --set alone applies to the defaults.
  const bool has_preset = !o.preset.empty() || !o.sets.empty();
  const Preset preset = !o.preset.empty() ? load_preset(o.preset, o.sets)
                        : has_preset      ? parse_preset("", "--set", o.sets)
                                          : Preset{};

  if (o.json) {
    for (const Knob& k : knobs()) {
      nlohmann::json j{{"name", k.name}, {"type", to_string(k.type)}, {"apply", to_string(k.apply)}, {"doc", k.doc},
                       {"default", to_json(k.get(Preset{}))}};
      if (k.type == KnobType::Int) {
        j["min"] = static_cast<int64_t>(k.min);
        j["max"] = static_cast<int64_t>(k.max);
      } else if (k.type == KnobType::Float) {
        j["min"] = k.min;
        j["max"] = k.max;
      }
      if (k.type == KnobType::Choice) j["choices"] = k.choices;
      if (has_preset) j["value"] = to_json(k.get(preset));
      std::cout << j.dump() << "\n";
    }
    return;
  }

  struct Row {
    std::string cells[5];
    std::string doc;
  };
  std::vector<Row> rows{{{"name", "type", "range", has_preset ? "value" : "default", "apply"}, "doc"}};
  for (const Knob& k : knobs())
    rows.push_back({{k.name, to_string(k.type), knob_range(k), knob_value(preset, k), to_string(k.apply)}, k.doc});
  size_t width[5] = {};
  for (const Row& r : rows)
    for (size_t c = 0; c < 5; ++c) width[c] = std::max(width[c], r.cells[c].size());
  for (const Row& r : rows) {
    for (size_t c = 0; c < 5; ++c) std::cout << r.cells[c] << std::string(width[c] - r.cells[c].size() + 2, ' ');
    std::cout << r.doc << "\n";
  }
}

}  // namespace

void register_knobs(CLI::App& app) {
  auto o = std::make_shared<KnobsOptions>();
  CLI::App* cmd = app.add_subcommand("knobs", "List every knob: name, type, range, default (or a preset's value), live/restart, doc");
  cmd->add_option("--preset,-p", o->preset, "Show this preset's values (name in assets/presets or a .toml path)");
  cmd->add_option("--set,-s", o->sets, "Knob override KEY=VALUE (repeatable), applied before listing");
  cmd->add_flag("--json", o->json, "One JSON object per knob and line");
  cmd->callback([o] { run_knobs(*o); });
}

}  // namespace memscope::app
