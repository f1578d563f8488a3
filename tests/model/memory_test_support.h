// Shared helpers for the memory tests (tests/model/test_memory_*.cpp).
#pragma once
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
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

// max|a − b| / max|b|: one number for how far a is from the reference b.
inline double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / (b.abs().max() + 1e-30)).item<double>();
}

// max|a − b| / max(1, max|b|), in float64: relative to the reference's scale, absolute where that is
// below 1 (values and gradients of order one), and 0 for empty tensors.
inline double error_at_unit_scale(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  if (b.numel() == 0) return 0.0;
  const double scale = std::max(1.0, b.abs().max().item<double>());
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>() / scale;
}

// Two runs' parameter gradients (parameters() order, undefined where a parameter got none): the
// same ones defined, each within `tolerance` relative of the reference's. Returns how many were
// compared, for the caller to check that the comparison was not empty.
inline int check_gradients_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                                 double tolerance) {
  REQUIRE(got.size() == want.size());
  int compared = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    REQUIRE(got[i].defined() == want[i].defined());
    if (!want[i].defined()) continue;
    INFO("parameter " << i);
    CHECK(relative_error(got[i], want[i]) < tolerance);
    ++compared;
  }
  return compared;
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
