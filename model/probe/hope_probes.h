// The HOPE probes (issue 8, SPEC §7): each CMS level's state norm and update tick, and the
// self-modifying memories' target errors, per layer, for batch row 0 after a step. Split in two
// so that collect_probes brings them back in its one transfer: the tensor part on the device,
// then the unpacking on the host.
#pragma once
#include <ATen/core/Tensor.h>

#include "model/nn/language_model.h"
#include "model/probe/frame.h"

namespace memscope::model {

// The device-side numbers, flat: [L, levels] CMS norms, then [L, 5] target errors (hope blocks
// with a write so far). Undefined when the model has neither.
at::Tensor hope_probe_tensor(const LanguageModel& model, const LmState& state);

// Fills frame.cms_* and frame.selfmod_error from `host` (the tensor's values); the ticks come
// from the stream position. Returns the floats consumed.
size_t unpack_hope_probes(Frame& frame, const LanguageModel& model, const LmState& state, const float* host);

}  // namespace memscope::model
