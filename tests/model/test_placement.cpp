// The fused CPU kernels (issue 20) give the same bits wherever malloc puts their inputs and
// scratch. They are built with reassociation (model/CMakeLists.txt). A loop that GCC vectorised
// behind a run-time check that its buffers do not overlap took its vector copy or its scalar copy
// by where those buffers lay, and the two copies round differently: two runs of one model in one
// process differed in the 7th digit from the first frame on (on an AMD VM, where malloc put a
// head's 32-byte scratch vectors within one AVX-512 register of each other). Each case here runs
// one computation eight times, each after taking a different set of heap blocks and with its input
// at a different address, and wants every run's bits equal to the first's. The bug needed the
// AVX-512 kernels (32-byte vectors within one 64-byte register of each other): on an AVX2-only
// CPU these cases pass with it too. The chunkwise forms keep their main scratch from call to call
// (a thread's Scratch), so for them the held blocks move only the per-call buffers.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config/preset.h"
#include "model/memory/memory_layer.h"

using namespace memscope::model;

namespace {

using Outputs = std::vector<at::Tensor>;

// `compute` run eight times, each with other heap blocks held and its input copied to another
// address, 64-byte aligned as ATen's own (an sgemm may round by its operands' alignment, MKL's
// does); every run's outputs must equal the first run's, bit for bit.
void check_same_bits_anywhere(const at::Tensor& input, const std::function<Outputs(const at::Tensor&)>& compute) {
  Outputs first;
  for (int run = 0; run < 8; ++run) {
    INFO("run " << run);
    std::vector<std::unique_ptr<char[]>> held;  // moves where this run's small allocations land
    for (int i = 0; i <= 3 * run; ++i) held.emplace_back(new char[static_cast<size_t>(8 + 16 * (run + i))]);
    constexpr int64_t kAligned = 16;  // floats in 64 bytes
    const at::Tensor placed = at::empty({input.numel() + 8 * kAligned}, input.options())
                                  .narrow(0, run * kAligned, input.numel())
                                  .view(input.sizes());
    placed.copy_(input);
    Outputs outputs = compute(placed);
    if (run == 0) {
      first = std::move(outputs);
      REQUIRE_FALSE(first.empty());
      continue;
    }
    REQUIRE(outputs.size() == first.size());
    for (size_t i = 0; i < first.size(); ++i) {
      INFO("output " << i);
      CHECK(torch::equal(outputs[i], first[i]));
    }
  }
}

MemoryLayer layer_for(const std::string& preset, const std::vector<std::string>& sets, int64_t d_model,
                      int64_t heads) {
  torch::manual_seed(5);
  return MemoryLayer(load_preset(preset, sets).memory, MemoryLayerOptions{d_model, heads, 0});
}

at::Tensor input_for(int64_t batch, int64_t tokens, int64_t d_model) {
  torch::manual_seed(9);
  return torch::randn({batch, tokens, d_model});
}

void add_state(const MemoryState& state, Outputs& out) {
  out.insert(out.end(), state.memory.begin(), state.memory.end());
  out.insert(out.end(), state.momentum.begin(), state.momentum.end());
}

}  // namespace

TEST_CASE("the fused MLP step gives the same bits wherever its data lies", "[model]") {
  torch::NoGradGuard no_grad;
  // Titans' deep memory and Atlas's (a window of 4, Muon), at head dims 8 (demo-mqar's) and 16.
  for (const auto& [preset, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"titans-lmm", {"memory.inner.clip=1"}}, {"atlas", {"memory.window.c=4"}}})
    for (const int64_t d_model : {32, 64}) {
      INFO(preset << " at d_model " << d_model << ", 4 heads");
      const MemoryLayer layer = layer_for(preset, sets, d_model, 4);
      check_same_bits_anywhere(input_for(2, 6, d_model), [&](const at::Tensor& x) {
        MemoryState state = layer->initial_state(2);
        Outputs out;
        for (int64_t t = 0; t < x.size(1); ++t) {
          StepOutput step = layer->step(x.select(1, t), state, 1, StepDetail::Record);
          out.push_back(step.y);
          out.push_back(step.record.loss_before);
          out.push_back(step.record.loss_after);
          out.insert(out.end(), step.record.gradient.begin(), step.record.gradient.end());
        }
        add_state(state, out);
        return out;
      });
    }
}

TEST_CASE("the MLP memory's fused chunkwise forms give the same bits wherever their data lies", "[model]") {
  torch::NoGradGuard no_grad;
  // gd with momentum (fused_mlp_chunkwise.cpp) and dgd (decayed_contractions.cpp), chunks of 8.
  for (const char* optimiser : {"gd-momentum", "dgd"}) {
    INFO(optimiser);
    const MemoryLayer layer = layer_for(
        "titans-lmm", {"memory.optimiser=" + std::string(optimiser), "memory.window.c=3"}, 32, 4);
    check_same_bits_anywhere(input_for(2, 21, 32), [&](const at::Tensor& x) {
      MemoryState state = layer->initial_state(2);
      Outputs out{layer->forward(x, state, 8).y};
      add_state(state, out);
      return out;
    });
  }
}

TEST_CASE("the linear memory's fused chunkwise form and its backward give the same bits wherever their data lies",
          "[model]") {
  // Titans' linear rule (fused_linear_chunkwise.cpp), trained: the output and every gradient.
  const MemoryLayer layer = layer_for("titans-lmm", {"memory.structure=linear"}, 32, 4);
  check_same_bits_anywhere(input_for(2, 21, 32), [&](const at::Tensor& x_in) {
    const at::Tensor x = x_in.clone().requires_grad_(true);
    MemoryState state = layer->initial_state(2);
    const at::Tensor y = layer->forward(x, state, 8).y;
    for (auto& p : layer->parameters()) p.mutable_grad() = at::Tensor();
    (y * y).sum().backward();
    Outputs out{y.detach(), x.grad()};
    for (const auto& p : layer->parameters())
      if (p.grad().defined()) out.push_back(p.grad().clone());
    return out;
  });
}
