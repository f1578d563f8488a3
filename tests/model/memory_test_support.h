// Shared helpers for the memory tests (tests/model/test_memory_*.cpp).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "model/memory/memory_layer.h"
#include "model/memory/memory_rule.h"
#include "support/test_device.h"

namespace memscope::test {

using model::MemoryLayer;
using model::MemoryRule;

// A preset with test-friendly overrides: a larger max lr (lr ≈ 0.25) so the forms disagree
// visibly when they are wrong, instead of every variant staying within tolerance of M_0.
inline MemoryRule test_rule(const std::string& preset, std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(), "memory.lr.max=25");
  return model::load_memory_rule(preset, overrides);
}

inline MemoryLayer make_layer(const MemoryRule& rule, int64_t d_model, int64_t heads, torch::Dtype dtype,
                              uint64_t seed = 7) {
  torch::manual_seed(seed);
  MemoryLayer layer(rule, model::MemoryLayerOptions{d_model, heads, 0});
  layer->to(test_device(), dtype);  // initialised on the CPU: the same weights on every device
  return layer;
}

inline torch::Tensor make_input(int64_t batch, int64_t tokens, int64_t d_model, torch::Dtype dtype,
                                uint64_t seed = 11) {
  torch::manual_seed(seed);
  return torch::randn({batch, tokens, d_model}, torch::TensorOptions().dtype(dtype)).to(test_device());
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

inline const std::vector<std::string>& all_presets() {
  static const std::vector<std::string> names{"titans-lmm", "atlas",   "omeganet", "atlas-linear", "deltanet",
                                              "ttt-linear", "hebbian", "moneta",   "yaad",         "memora"};
  return names;
}

inline const std::vector<std::string>& linear_presets() {
  static const std::vector<std::string> names{"omeganet", "atlas-linear", "deltanet", "ttt-linear",
                                              "hebbian",  "moneta",       "yaad",     "memora"};
  return names;
}

}  // namespace memscope::test
