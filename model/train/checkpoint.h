// Checkpoints: one safetensors file with the parameters ("model/NAME"), the AdamW state
// ("optim/…"), torch's CPU generator ("rng/torch") and, in __metadata__, the resolved preset TOML,
// the step, the data seed and the world size. Everything a resumed run needs to continue bit for bit on CPU.
#pragma once
#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <string>

#include "model/config/preset.h"
#include "model/nn/language_model.h"
#include "model/train/adamw.h"

namespace memscope::model {

inline constexpr const char* kCheckpointFormat = "memscope-checkpoint-1";

struct Checkpoint {
  std::string path;
  std::string preset_name;
  std::string config_toml;  // Preset::toml of the run that wrote it
  int64_t step = 0;         // training steps completed
  int64_t optimiser_steps = 0;
  int64_t world_size = 1;   // ranks of the run that wrote it (data-parallel); 1 when not recorded
  std::map<std::string, at::Tensor> tensors;
};

void write_checkpoint(const std::filesystem::path& path, const Preset& preset, const LanguageModel& model,
                      const AdamW& optimiser, int64_t step, int world_size = 1);

// Reads and checks a checkpoint; every problem (not a file, not safetensors, not a memscope
// checkpoint, missing metadata) is a UserError naming the file.
Checkpoint read_checkpoint(const std::filesystem::path& path);

// The world size a checkpoint records, from its header alone (1 for checkpoints before issue 21).
int64_t checkpoint_world_size(const std::filesystem::path& path);
// The training steps a checkpoint has completed, from its header alone.
int64_t checkpoint_step(const std::filesystem::path& path);

// Copies the checkpoint's parameters into `model`. A parameter missing from the file, one the
// model does not have, or one of another shape is a UserError naming it.
void load_parameters(LanguageModel& model, const Checkpoint& checkpoint);

// The preset stored in the checkpoint, with `overrides` applied on top.
Preset checkpoint_preset(const Checkpoint& checkpoint, const std::vector<std::string>& overrides = {});

}  // namespace memscope::model
