// Newton–Schulz orthogonalisation NS_k (SPEC §6), the "Muon" step of Atlas.
#pragma once
#include <ATen/core/Tensor.h>

#include "model/memory/ns_schedule.h"

namespace memscope::model {

// NS_k over the last two dimensions of g; leading dimensions are a batch. Wide and tall
// matrices both work (tall ones are transposed so A = X Xᵀ is the small Gram matrix).
// Differentiable; runs on g's device and dtype.
at::Tensor newton_schulz(const at::Tensor& g, const NsSchedule& schedule = {});

// The same NS_k for the sequential step's small matrices (a head's d×d momentum): CPU float32,
// no autograd, a plain loop per matrix instead of ~20 ATen calls (issue 20: at d = 16 those calls
// were most of demo-mqar's memory step). Equal to newton_schulz() up to float rounding; larger or
// other tensors go to newton_schulz().
at::Tensor newton_schulz_small(const at::Tensor& g, const NsSchedule& schedule = {});

}  // namespace memscope::model
