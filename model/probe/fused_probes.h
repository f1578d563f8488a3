// The probes of linear and MLP memories on the CPU in float32, fused (issue 20): the same frame
// collect_probes fills (SPEC §8), read straight from the state and the step records in one loop per
// head, with one batched SVD for every erank and Newton–Schulz spectrum. The general path spends
// ~100 small ATen calls a frame, several times a fused step's cost. collect_probes hands over when
// fused_probes_apply(); tests/model/test_fused_probes.cpp holds the two paths equal.
#pragma once
#include <vector>

#include "model/probe/probe_collector.h"

namespace memscope::model {

// Linear memory (M) or MLP memory (W1, W2), float32 on the CPU, no HOPE or CMS parts, no per-feature
// dgd and no dgd on an MLP memory, and matrices (when asked for) that need no shrinking.
bool fused_probes_apply(const ProbeInputs& in, const ProbeConfig& config);

// collect_probes for those models: the same frame and extras (snapshots at full size: the
// config's shrinking was ruled out by fused_probes_apply).
std::vector<double> collect_fused_probes(Frame& frame, const ProbeInputs& in);

}  // namespace memscope::model
