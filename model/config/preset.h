// A preset: everything one experiment needs, as data (DESIGN principles 3 and 5). Presets are TOML
// files in assets/presets/ whose dotted paths are the knob names; `inherits = "atlas"` starts from
// another preset's tables, and `--set key=value` overrides apply on top.
#pragma once
#include <string>
#include <vector>

#include "model/data/task_config.h"
#include "model/engine/engine_config.h"
#include "model/memory/memory_rule.h"
#include "model/nn/lm_config.h"
#include "model/probe/probe_config.h"
#include "model/session/record_config.h"
#include "model/train/train_config.h"

namespace memscope::model {

// Another run of the same preset that the GUI's compare view shows beside it (issue 7's teaching
// presets: delta against Omega, Muon on and off, a retention sweep). `[[compare]]` in the TOML.
struct CompareRun {
  std::string label;              // the legend name ("Omega, c = 8")
  std::vector<std::string> sets;  // KEY=VALUE overrides applied from step 0; restart knobs allowed
};

struct Preset {
  std::string name;         // the file stem ("demo-mqar")
  std::string description;  // one line for the presets browser
  std::vector<CompareRun> compare;  // not knobs: they say what to show, not how the model runs
  MemoryRule memory;        // unused when model.block = "swa"
  LmConfig model;
  TrainConfig train;
  TaskConfig task;
  ProbeConfig probe;
  DetectConfig detect;
  EngineConfig engine;
  RecordConfig record;
  // The resolved TOML (inheritance and overrides applied). Checkpoints and sessions store it, and
  // parse_preset on it gives this preset back exactly.
  std::string toml;
};

// Loads assets/presets/NAME.toml (a bare name) or a .toml path and applies the overrides.
// Every problem is a UserError naming the file and the dotted key.
Preset load_preset(const std::string& preset_or_path, const std::vector<std::string>& overrides = {});

// Parses preset text; `origin` names the source in error messages and gives the preset its name.
Preset parse_preset(const std::string& toml_text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});

}  // namespace memscope::model
