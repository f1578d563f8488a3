// The MLP memory's fused chunkwise form (model/memory/fused_mlp_chunkwise.cpp, issue 20) against
// the ATen dual form it stands in for (set_fused_step(false)) and against the sequential steps with
// the same chunk (SPEC §9), on Titans' rule with windows, both read orders, the clip and both linear
// retentions; and its GELU (model/memory/gelu_math.cpp) against double precision.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "memory_test_support.h"
#include "model/memory/gelu_math.h"
#include "model/memory/memory_layer.h"
#include "model/memory/mlp_memory.h"

using namespace memscope::model;
using memscope::test::make_input;
using memscope::test::make_layer;
using memscope::test::max_abs_diff;
using memscope::test::test_rule;

namespace {

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return max_abs_diff(a, b) / std::max(1.0, b.abs().max().item<double>());
}

// W₁, W₂ and both momenta of two states, each within `tolerance` of the other's (relative).
void check_weights_close(const MemoryState& a, const MemoryState& b, double tolerance) {
  for (size_t i = 0; i < 2; ++i) {
    CHECK(relative(a.memory[i], b.memory[i]) < tolerance);
    CHECK(relative(a.momentum[i], b.momentum[i]) < tolerance);
  }
}

MemoryLayer mlp_layer(const std::vector<std::string>& extra) {
  std::vector<std::string> sets{"memory.structure=mlp", "memory.optimiser=gd-momentum"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return make_layer(test_rule("titans-lmm", sets), 32, 2, torch::kFloat32);  // d = 16, hidden 64
}

std::string described(const std::vector<std::string>& sets) {
  std::string out;
  for (const auto& s : sets) out += s + " ";
  return out;
}

// The rules the fused form takes: windows of 1, 3 and 8 (with the ring's keys before a chunk),
// both read orders, the clip, both linear retentions, and polynomial features.
std::vector<std::vector<std::string>> fused_rules() {
  std::vector<std::vector<std::string>> rules;
  for (const char* window : {"memory.window.c=1", "memory.window.c=3", "memory.window.c=8"})
    for (const char* read : {"memory.read=after-write", "memory.read=before-write"})
      for (const char* clip : {"memory.inner.clip=0", "memory.inner.clip=0.05"})
        rules.push_back({window, read, clip});
  rules.push_back({"memory.window.c=3", "memory.retention=none"});
  rules.push_back({"memory.window.c=4", "memory.feature_map.kind=poly", "memory.feature_map.degree=2"});
  return rules;
}

}  // namespace

TEST_CASE("fused MLP chunkwise: equals the ATen dual form, across calls and chunks", "[model]") {
  memscope::test::ScopedCpuDevice cpu;  // the fused kernels are CPU code
  if (!memscope::test::cpu_kernels_testable()) return;
  for (const auto& rule : fused_rules()) {
    INFO(described(rule));
    auto layer = mlp_layer(rule);
    const auto x = make_input(2, 45, 32, torch::kFloat32);
    torch::NoGradGuard no_grad;
    // 45 tokens in chunks of 16, as one call (16, 16, 13) and as two (20 + 25: the second call
    // continues a chunk from its stored gradient point).
    for (const bool split : {false, true}) {
      MemoryState fused = layer->initial_state(2), aten = layer->initial_state(2);
      auto run = [&](MemoryState& s) {
        if (!split) return layer->forward(x, s, 16).y;
        const at::Tensor first = layer->forward(x.slice(1, 0, 20), s, 16).y;
        return torch::cat({first, layer->forward(x.slice(1, 20), s, 16).y}, 1);
      };
      const at::Tensor y_fused = run(fused);
      layer->set_fused_step(false);
      const at::Tensor y_aten = run(aten);
      layer->set_fused_step(true);
      CHECK(relative(y_fused, y_aten) < 2e-5);
      CHECK(max_abs_diff(y_fused, y_aten) > 0);  // the fused form ran: its sums go in another order
      check_weights_close(fused, aten, 2e-5);
      CHECK(fused.tokens == aten.tokens);
      CHECK(torch::equal(fused.ring_phi, aten.ring_phi));
    }
  }
}

TEST_CASE("fused MLP chunkwise: equals the sequential steps frozen at the chunk starts", "[model]") {
  // Not pinned to the CPU: on CUDA the ATen chunkwise form against the sequential steps.
  // step(x_t, state, b) takes each gradient at its chunk's start memory: the chunkwise model token
  // by token (SPEC §9), here through the fused sequential step, an independent computation.
  for (const auto& rule : fused_rules()) {
    INFO(described(rule));
    auto layer = mlp_layer(rule);
    const auto x = make_input(2, 21, 32, torch::kFloat32);
    torch::NoGradGuard no_grad;
    MemoryState chunked = layer->initial_state(2), stepped = layer->initial_state(2);
    const at::Tensor y_chunked = layer->forward(x, chunked, 8).y;
    std::vector<at::Tensor> ys;
    for (int64_t t = 0; t < x.size(1); ++t)
      ys.push_back(layer->step(x.select(1, t), stepped, 8, StepDetail::OutputOnly).y);
    CHECK(relative(y_chunked, torch::stack(ys, 1)) < 5e-5);
    check_weights_close(chunked, stepped, 5e-5);
  }
}

TEST_CASE("fused MLP chunkwise: a NaN in one batch row's values stays in that row, as in the ATen form",
          "[model]") {
  auto layer = mlp_layer({"memory.window.c=3"});
  auto x = make_input(2, 20, 32, torch::kFloat32);
  x[1][5][3] = std::nanf("");
  torch::NoGradGuard no_grad;
  MemoryState fused = layer->initial_state(2), aten = layer->initial_state(2);
  const at::Tensor y_fused = layer->forward(x, fused, 8).y;
  layer->set_fused_step(false);
  const at::Tensor y_aten = layer->forward(x, aten, 8).y;
  CHECK(torch::equal(torch::isnan(y_fused), torch::isnan(y_aten)));
  CHECK(torch::isnan(y_fused[1]).any().item<bool>());
  CHECK_FALSE(torch::isnan(y_fused[0]).any().item<bool>());
  CHECK(relative(y_fused[0], y_aten[0]) < 2e-5);
  for (size_t i = 0; i < 2; ++i)
    CHECK(torch::equal(torch::isnan(fused.memory[i]), torch::isnan(aten.memory[i])));
}

TEST_CASE("fused MLP chunkwise: with grad on, the forward keeps the differentiable ATen form", "[model]") {
  memscope::test::ScopedCpuDevice cpu;  // the fused kernels are CPU code
  // Training needs autograd through the ATen ops: the fused form (no autograd) must not take it, or
  // no outer gradient would reach the layer's parameters.
  auto layer = mlp_layer({"memory.window.c=3"});
  const auto x = make_input(1, 12, 32, torch::kFloat32);
  MemoryState s = layer->initial_state(1);
  layer->forward(x, s, 4).y.pow(2).sum().backward();
  bool any_gradient = false;
  for (const auto& p : layer->parameters())
    any_gradient |= p.grad().defined() && p.grad().abs().sum().item<double>() > 0;
  CHECK(any_gradient);
}

TEST_CASE("GELU's vectorised erf: within 3 ulp of the correctly rounded erf, NaN and Inf as glibc",
          "[model]") {
  std::vector<float> xs;
  for (uint32_t bits = 0; bits < 0x40C00000u; bits += 97) {  // every 97th float in [0, 6)
    float x;
    std::memcpy(&x, &bits, sizeof x);
    xs.push_back(x);
    xs.push_back(-x);
  }
  std::vector<float> out(xs.size());
  erf_array(xs.data(), out.data(), static_cast<int64_t>(xs.size()));
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = std::erf(static_cast<double>(xs[i]));
    const float rounded = static_cast<float>(want);
    const double ulp = std::fabs(static_cast<double>(std::nextafter(rounded, INFINITY)) - rounded);
    worst = std::max(worst, std::fabs(out[i] - want) / ulp);
  }
  INFO("largest error " << worst << " ulp over " << xs.size() << " inputs");
  CHECK(worst < 3.0);
  CHECK(worst > 0.0);
  std::vector<float> special{std::nanf(""), INFINITY, -INFINITY, 0.0f}, special_out(4);
  erf_array(special.data(), special_out.data(), 4);
  CHECK(std::isnan(special_out[0]));
  CHECK(special_out[1] == 1.0f);
  CHECK(special_out[2] == -1.0f);
  CHECK(special_out[3] == 0.0f);
}

TEST_CASE("GELU and its derivative over arrays equal mlp_memory's exact GELU in double", "[model]") {
  memscope::test::ScopedCpuDevice cpu;  // the fused kernels are CPU code
  const at::Tensor h = torch::linspace(-12, 12, 40001, torch::kFloat32);
  at::Tensor gelu = torch::empty_like(h), derivative = torch::ones_like(h);
  gelu_array(h.data_ptr<float>(), gelu.data_ptr<float>(), h.numel());
  multiply_by_gelu_derivative(h.data_ptr<float>(), derivative.data_ptr<float>(), h.numel());
  const at::Tensor h64 = h.to(torch::kFloat64);
  // ½h(1 + erf(h/√2)) loses the bits of 1 + erf when h is very negative, in float32 as in ATen's
  // exact_gelu: absolute error ≤ a few ulp of 1 times |h|.
  const at::Tensor bound = 4e-7 * (1 + h64.abs());
  CHECK(((gelu.to(torch::kFloat64) - exact_gelu(h64)).abs() <= bound).all().item<bool>());
  CHECK(((derivative.to(torch::kFloat64) - exact_gelu_derivative(h64)).abs() <= bound).all().item<bool>());
  // GELU''(h) = φ(h)(2 − h²), the outer backward's through an inner gradient (exact_gelu.cpp); it
  // is 0 to float precision far out, and stays 0 for a diverged h (exp's clamp must not show).
  at::Tensor second = torch::ones_like(h);
  multiply_by_gelu_second_derivative(h.data_ptr<float>(), second.data_ptr<float>(), h.numel());
  const at::Tensor second64 = at::exp(-0.5 * h64 * h64) * (0.5 * M_2_SQRTPI * M_SQRT1_2) * (2.0 - h64 * h64);
  CHECK(((second.to(torch::kFloat64) - second64).abs() <= 4e-7).all().item<bool>());
  at::Tensor far = torch::tensor({1e4f, -1e15f, 3e38f}), far_out = torch::ones({3});
  multiply_by_gelu_second_derivative(far.data_ptr<float>(), far_out.data_ptr<float>(), 3);
  CHECK(far_out.abs().max().item<float>() == 0.0f);
}
