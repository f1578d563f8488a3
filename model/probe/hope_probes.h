// The HOPE probes (issue 8, SPEC §7): each CMS level's state norm and update tick, the
// self-modifying memories' target errors and effective retention, and the per-feature retain
// and lr of the step's write (memory.dgd.per_feature layers, or hope blocks), per layer, for
// batch row 0 after a step. Split in two so that collect_probes brings them back in its one
// transfer: the tensor part on the device, then the unpacking on the host.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "model/nn/language_model.h"
#include "model/probe/frame.h"

namespace memscope::model {

using StepRecords = std::vector<std::optional<StepRecord>>;

// The device-side numbers, flat: [L, levels] CMS norms, [L, 5] target errors, [L, 2] the dgd
// preconditioner's eigenvalue range, then the per-feature retain and lr [L, rows, d] each.
// Undefined when the model has none of them.
// `records` (may be null) are the layers' step records (train frames have none).
at::Tensor hope_probe_tensor(const LanguageModel& model, const LmState& state, const StepRecords* records);

// Fills the frame's HOPE fields from `host` (the tensor's values); the ticks come from the stream
// position. Returns the floats consumed.
size_t unpack_hope_probes(Frame& frame, const LanguageModel& model, const LmState& state, const StepRecords* records,
                          const float* host);

}  // namespace memscope::model
