#include "model/train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include "model/session/safetensors_tensor.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

const std::string kModelPrefix = "model/";
const std::string kRngTensor = "rng/torch";

int64_t metadata_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& where) {
  const auto it = meta.find(key);
  if (it == meta.end()) throw UserError(where + ": not a memscope checkpoint (no '" + key + "' in __metadata__)");
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second, &used);
    if (used != it->second.size() || v < 0) throw std::invalid_argument(key);
    return v;
  } catch (const std::exception&) {
    throw UserError(where + ": __metadata__ '" + key + "' is not a step count: '" + it->second + "'");
  }
}

}  // namespace

void write_checkpoint(const std::filesystem::path& path, const Preset& preset, const LanguageModel& model,
                      const AdamW& optimiser, int64_t step, int world_size) {
  NamedTensors tensors;
  for (const auto& item : model->named_parameters()) tensors.emplace_back(kModelPrefix + item.key(), item.value().detach());
  for (auto& t : optimiser.state()) tensors.push_back(std::move(t));
  tensors.emplace_back(kRngTensor, at::detail::getDefaultCPUGenerator().get_state());
  write_safetensors(path, tensors,
                    {{"format", kCheckpointFormat},
                     {"preset", preset.name},
                     {"config", preset.toml},
                     {"step", std::to_string(step)},
                     {"optimiser_steps", std::to_string(optimiser.steps())},
                     {"world_size", std::to_string(world_size)}});
}

Checkpoint read_checkpoint(const std::filesystem::path& path) {
  const std::string where = path.string();
  if (!std::filesystem::is_regular_file(path)) throw UserError(where + ": checkpoint file not found");
  SafetensorsFile file(where);  // checks every bound of the header
  const auto& meta = file.header().metadata;
  const auto format = meta.find("format");
  if (format == meta.end() || format->second != kCheckpointFormat)
    throw UserError(where + ": not a memscope checkpoint (expected format '" + std::string(kCheckpointFormat) + "')");
  Checkpoint c;
  c.path = where;
  c.preset_name = meta.count("preset") ? meta.at("preset") : "checkpoint";
  if (!meta.count("config")) throw UserError(where + ": checkpoint has no 'config' in __metadata__");
  c.config_toml = meta.at("config");
  c.step = metadata_int(meta, "step", where);
  c.optimiser_steps = metadata_int(meta, "optimiser_steps", where);
  if (meta.count("world_size")) c.world_size = metadata_int(meta, "world_size", where);  // older checkpoints: 1
  for (const auto& info : file.header().tensors) c.tensors.emplace(info.name, read_tensor(file, info));
  return c;
}

int64_t checkpoint_world_size(const std::filesystem::path& path) {
  const SafetensorsFile file(path.string());
  const auto& meta = file.header().metadata;
  return meta.count("world_size") ? metadata_int(meta, "world_size", path.string()) : 1;
}

int64_t checkpoint_step(const std::filesystem::path& path) {
  const SafetensorsFile file(path.string());
  return metadata_int(file.header().metadata, "step", path.string());
}

void load_parameters(LanguageModel& model, const Checkpoint& checkpoint) {
  at::NoGradGuard no_grad;
  const auto parameters = model->named_parameters();
  for (const auto& item : parameters) {
    const std::string name = kModelPrefix + item.key();
    const auto it = checkpoint.tensors.find(name);
    if (it == checkpoint.tensors.end())
      throw UserError(checkpoint.path + ": parameter '" + item.key() + "' is missing (a checkpoint of another model?)");
    if (it->second.sizes() != item.value().sizes()) {
      std::ostringstream why;
      why << checkpoint.path << ": parameter '" << item.key() << "' has shape " << it->second.sizes()
          << " but the model expects " << item.value().sizes();
      throw UserError(why.str());
    }
    item.value().copy_(it->second);
  }
  for (const auto& [name, tensor] : checkpoint.tensors)
    if (name.rfind(kModelPrefix, 0) == 0 && !parameters.contains(name.substr(kModelPrefix.size())))
      throw UserError(checkpoint.path + ": parameter '" + name.substr(kModelPrefix.size()) +
                      "' is not in this model (a checkpoint of another model?)");
  const auto rng = checkpoint.tensors.find(kRngTensor);
  if (rng != checkpoint.tensors.end()) {
    try {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      generator.set_state(rng->second);
    } catch (const std::exception& e) {
      throw UserError(checkpoint.path + ": bad generator state: " + one_line(e.what()));
    }
  }
}

Preset checkpoint_preset(const Checkpoint& checkpoint, const std::vector<std::string>& overrides) {
  Preset p = parse_preset(checkpoint.config_toml, checkpoint.path + " (config)", overrides);
  p.name = checkpoint.preset_name;
  return p;
}

}  // namespace memscope::model
