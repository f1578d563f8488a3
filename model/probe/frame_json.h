// Frames and events as JSON: the CLI's `step --json` lines and a session's events.jsonl.
// NaN ("not measured") becomes null.
#pragma once
#include <nlohmann/json.hpp>

#include "model/probe/event.h"
#include "model/probe/frame.h"

namespace memscope::model {

// {"step", "kind", "train_step", …, "layers": [{"layer", "heads": [{"head", "retain", …, "erank",
// "ns_error", "norm_M", …}]}]}. A head's metrics of its first memory weight are plain fields;
// further weights (mlp's W2) nest under their name. Matrices are left out (sessions store them).
nlohmann::json frame_to_json(const Frame& frame);

nlohmann::json event_to_json(const Event& event);

// The inverse of event_to_json; false (and `out` untouched) for anything that is not one.
bool event_from_json(const nlohmann::json& j, Event& out);

}  // namespace memscope::model
