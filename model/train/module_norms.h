// Per-module outer-loop probes (issue 18): for each module of the model, the outer gradient norm
// (before clipping) and the update-to-weight ratio ‖Δθ‖/‖θ‖ of the optimiser step. A gradient
// blow-up then has an address: "layer1/memory.W_K", not just "the gradient norm".
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace memscope::model {

// The module a parameter belongs to, from its registered name ("block1.memory.w_k"):
//   layer{L}/memory.W_K | W_Q | W_V | gate.retain | gate.lr | gate.momentum | gate.gamma |
//     gate.huber_delta | M0 (M_0, or W1_0/W2_0) | conv | feature_map | LN,
//   layer{L}/attention | ffn | cms | selfmod.{W_Q, M0, LN, gates} | mixing (the block's norms,
//     memory output and gate projections),
//   embedding (tied with the output head), head.norm.
std::string module_of(const std::string& parameter);

struct ModuleNorm {
  std::string name;
  double grad_norm = 0;     // ‖∂L/∂θ‖ over the module's parameters, before clipping
  double update_ratio = 0;  // ‖θ_after − θ_before‖ / ‖θ_before‖ of the optimiser step
};

// Groups parameters by module_of, in first-seen order: the gradient norms now (before clipping).
// `before` receives a copy of each parameter for update_ratios (empty: ratios are not measured).
// `total_norm`, when given, receives the global gradient norm, equal bit for bit to
// gradient_norm() (adamw.h): the trainer clips with it instead of measuring it again.
std::vector<ModuleNorm> module_gradient_norms(const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                              std::vector<at::Tensor>* before, double* total_norm = nullptr);

// Fills update_ratio from the parameters after the step and the copies taken before it.
void module_update_ratios(std::vector<ModuleNorm>& modules,
                          const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                          const std::vector<at::Tensor>& before);

// The module with the largest gradient norm (nullptr when there are none).
const ModuleNorm* largest_gradient(const std::vector<ModuleNorm>& modules);

}  // namespace memscope::model
