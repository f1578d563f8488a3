// The memscope-cli subcommands. Each lives in its own cmd_*.cpp and registers itself on the
// root app; main.cpp calls every register_* below.
#pragma once
#include <CLI/CLI.hpp>

namespace memscope::app {

void register_info(CLI::App& app);          // cmd_info.cpp: build, torch and device info
void register_memory_trace(CLI::App& app);  // cmd_memory_trace.cpp: one memory layer's full trace
void register_train(CLI::App& app);         // cmd_train.cpp: outer-loop training, checkpoints, resume
void register_eval(CLI::App& app);          // cmd_eval.cpp: a checkpoint's accuracy per task
void register_step(CLI::App& app);          // cmd_step.cpp: step a probe stream and print the probes
void register_knobs(CLI::App& app);         // cmd_knobs.cpp: the knob registry, defaults or a preset's values
void register_presets(CLI::App& app);       // cmd_presets.cpp: the shipped presets and their descriptions
void register_inspect(CLI::App& app);       // cmd_inspect.cpp: what a recorded session holds, and its damage
void register_export(CLI::App& app);        // cmd_export.cpp: a session as one safetensors file or CSV
void register_attach(CLI::App& app);        // cmd_attach.cpp: a headless viewer of a run served with --serve

}  // namespace memscope::app
