#include "model/session/session_info.h"

#include <ctime>
#include <nlohmann/json.hpp>

#include "memscope/version.h"
#include "model/config/knobs.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

SessionInfo session_info_for(const Preset& preset, const std::string& device, int64_t vocab) {
  SessionInfo s;
  s.memscope_version = MEMSCOPE_VERSION;
  s.created = utc_now();
  s.device = device;
  s.preset_name = preset.name;
  s.preset_toml = preset.toml;
  for (const Knob& k : knobs()) s.knobs[k.name] = knob_value(preset, k);
  s.block = to_string(preset.model.block);
  s.structure = to_string(preset.memory.structure);
  s.layers = preset.model.layers;
  s.memory_heads = preset.model.memory_heads;
  s.d_model = preset.model.d_model;
  s.vocab = vocab;
  s.record = preset.record;
  return s;
}

std::string session_info_json(const SessionInfo& s) {
  nlohmann::json last = nlohmann::json::object();
  for (const auto& [t, step] : s.last_step) last[std::to_string(t)] = step;
  const nlohmann::json j = {
      {"format", kSessionFormat},
      {"version", s.version},
      {"memscope_version", s.memscope_version},
      {"created", s.created},
      {"device", s.device},
      {"preset", {{"name", s.preset_name}, {"toml", s.preset_toml}}},
      {"knobs", s.knobs},
      {"model", {{"block", s.block}, {"structure", s.structure}, {"layers", s.layers},
                 {"memory_heads", s.memory_heads}, {"d_model", s.d_model}, {"vocab", s.vocab}}},
      {"record", {{"matrix_dtype", to_string(s.record.matrix_dtype)}, {"matrix_every", s.record.matrix_every},
                  {"chunk_steps", s.record.chunk_steps}}},
      {"world_size", s.world_size},
      {"closed", s.closed},
      {"frames", s.frames},
      {"chunks", s.chunks},
      {"events", s.events},
      {"last_step", last}};
  return j.dump(2) + "\n";
}

SessionInfo parse_session_info(const std::string& text, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw UserError(where + ": not valid JSON");
  auto fail = [&](const std::string& field, const std::string& what) -> void {
    throw UserError(where + ": '" + field + "' " + what);
  };
  // The field at a /-separated path, checked to be of the wanted kind.
  auto at = [&](const std::string& path, nlohmann::json::value_t kind) -> const nlohmann::json& {
    const nlohmann::json* node = &j;
    size_t start = 0;
    while (start <= path.size()) {
      const size_t slash = path.find('/', start);
      const std::string key = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      if (!node->is_object() || !node->contains(key)) fail(path, "is missing");
      node = &(*node)[key];
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    const bool ok = kind == nlohmann::json::value_t::number_integer ? node->is_number_integer() : node->type() == kind;
    if (!ok) fail(path, "has the wrong type");
    return *node;
  };
  using V = nlohmann::json::value_t;
  if (at("format", V::string) != kSessionFormat) fail("format", "is not \"memscope-session\"");
  SessionInfo s;
  s.version = at("version", V::number_integer).get<int>();
  if (s.version < 1 || s.version > kSessionVersion)
    fail("version", std::to_string(s.version) + " is not supported (this memscope reads up to " +
                        std::to_string(kSessionVersion) + ")");
  s.memscope_version = at("memscope_version", V::string).get<std::string>();
  s.created = at("created", V::string).get<std::string>();
  s.device = at("device", V::string).get<std::string>();
  s.preset_name = at("preset/name", V::string).get<std::string>();
  s.preset_toml = at("preset/toml", V::string).get<std::string>();
  for (const auto& [k, v] : at("knobs", V::object).items()) {
    if (!v.is_string()) fail("knobs/" + k, "is not a string");
    s.knobs[k] = v.get<std::string>();
  }
  s.block = at("model/block", V::string).get<std::string>();
  s.structure = at("model/structure", V::string).get<std::string>();
  s.layers = at("model/layers", V::number_integer).get<int64_t>();
  s.memory_heads = at("model/memory_heads", V::number_integer).get<int64_t>();
  s.d_model = at("model/d_model", V::number_integer).get<int64_t>();
  s.vocab = at("model/vocab", V::number_integer).get<int64_t>();
  const std::string dtype = at("record/matrix_dtype", V::string).get<std::string>();
  bool known = false;
  for (auto d : {MatrixDtype::F32, MatrixDtype::F16, MatrixDtype::BF16})
    if (dtype == to_string(d)) s.record.matrix_dtype = d, known = true;
  if (!known) fail("record/matrix_dtype", "is not f32, f16 or bf16");
  s.record.matrix_every = at("record/matrix_every", V::number_integer).get<int64_t>();
  s.record.chunk_steps = at("record/chunk_steps", V::number_integer).get<int64_t>();
  if (j.contains("world_size")) {
    s.world_size = at("world_size", V::number_integer).get<int64_t>();
    if (s.world_size < 1) fail("world_size", "is below 1");
  }
  s.closed = at("closed", V::boolean).get<bool>();
  s.frames = at("frames", V::number_integer).get<int64_t>();
  s.chunks = at("chunks", V::number_integer).get<int64_t>();
  s.events = at("events", V::number_integer).get<int64_t>();
  for (const auto& [k, v] : at("last_step", V::object).items()) {
    if (!v.is_number_integer()) fail("last_step/" + k, "is not an integer");
    int timeline = -1;
    try {
      timeline = std::stoi(k);
    } catch (const std::exception&) {
    }
    if (timeline < 0 || std::to_string(timeline) != k) fail("last_step/" + k, "is not a timeline number");
    s.last_step[timeline] = v.get<int64_t>();
  }
  return s;
}

}  // namespace memscope::model
