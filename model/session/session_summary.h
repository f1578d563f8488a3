// What `memscope-cli inspect` says about a session, as JSON (the --json output; the human output
// is printed from it): steps, layers and heads, the metrics measured, the snapshots, the events by
// kind, the damage and what it cost, and the config.
#pragma once
#include <nlohmann/json.hpp>

#include "model/session/session_reader.h"

namespace memscope::model {

nlohmann::json session_summary(const SessionReader& session);

// The same for one safetensors file (a chunk or an export): its tensors and metadata.
nlohmann::json safetensors_summary(const std::string& path);

}  // namespace memscope::model
