// StepDetail::RecordLater (model/memory/memory_layer.h): the general step leaves its record's loss
// after the write to finish_record(), which the engine's probes run on their own thread; the fused
// steps compute theirs at once. Finished, the record is Record's bit for bit less the per-weight
// gradients, which it leaves out (no probe reads them), and the step's output and state are the
// same either way.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <thread>

#include "model/config/preset.h"
#include "model/memory/memory_layer.h"
#include "model/util/cpu_kernels.h"

using namespace memscope::model;

namespace {

// `b` is RecordLater's record, finished: Record's `a` without its gradients.
void check_same_record(const StepRecord& a, const StepRecord& b) {
  for (const auto& [x, y] : {std::pair{a.phi_k, b.phi_k}, std::pair{a.v, b.v}, std::pair{a.retain, b.retain},
                             std::pair{a.lr, b.lr}, std::pair{a.gamma, b.gamma}, std::pair{a.loss_before, b.loss_before},
                             std::pair{a.loss_after, b.loss_after}}) {
    REQUIRE(x.defined() == y.defined());
    if (x.defined()) CHECK(torch::equal(x, y));
  }
  CHECK_FALSE(a.gradient.empty());
  CHECK(b.gradient.empty());
  REQUIRE(a.ns_output.size() == b.ns_output.size());
  for (size_t i = 0; i < a.ns_output.size(); ++i) CHECK(torch::equal(a.ns_output[i], b.ns_output[i]));
}

}  // namespace

TEST_CASE("a record finished later, on another thread, is the whole record but its gradients, bit for bit",
          "[model]") {
  struct Case {
    std::string preset;
    std::vector<std::string> sets;
    // The general step (the fused one switched off, or a rule it does not take): it defers the
    // loss after the write; the fused steps record it at once (the MLP one's since README "The
    // loss after the write, where the step ran").
    bool general;
  };
  const std::vector<Case> cases{
      {"titans-lmm", {"memory.structure=mlp"}, true},  // Titans-MLP: gd with momentum
      {"atlas", {"memory.window.c=4"}, true},          // Atlas-MLP: Muon, an Omega window
      {"titans-lmm", {"memory.structure=linear", "memory.bias=huber"}, true},  // linear, general path
      {"titans-lmm", {"memory.structure=linear", "memory.feature_map.kind=identity"}, false},  // fused
      {"titans-lmm", {"memory.structure=mlp"}, false},  // the fused MLP step: read after the write
      {"atlas", {"memory.window.c=4", "memory.read=before-write"}, false},  // and before it, with Muon
  };
  // Under MEMSCOPE_CPU_KERNELS=0 there is no fused step: every case is the general one.
  const bool fused_steps = cpu_kernels_on(c10::Device("cpu"));
  for (Case c : cases) {
    c.general = c.general || !fused_steps;
    std::string name = c.preset;
    for (const auto& s : c.sets) name += " " + s;
    INFO(name);
    torch::manual_seed(4);
    MemoryLayer layer(load_preset(c.preset, c.sets).memory, MemoryLayerOptions{32, 2, 0});
    layer->set_fused_step(!c.general);
    torch::NoGradGuard no_grad;
    const at::Tensor x = torch::randn({1, 6, 32});
    MemoryState now = layer->initial_state(1), later = layer->initial_state(1);
    for (int64_t t = 0; t < 6; ++t) {
      const StepOutput a = layer->step(x.select(1, t), now, 1, StepDetail::Record);
      StepOutput b = layer->step(x.select(1, t), later, 1, StepDetail::RecordLater);
      CHECK(torch::equal(a.y, b.y));
      CHECK(torch::equal(now.memory[0], later.memory[0]));
      CHECK(a.record.loss_before.defined());
      CHECK(b.record.loss_after.defined() == !c.general);
      CHECK(static_cast<bool>(b.record.loss_after_later) == c.general);
      // Finished on another thread, where grad mode is on by default, from a copy of the weights
      // after the write (as the engine's probes finish it); or here from the state's own.
      if (t % 2 == 1) {
        std::vector<at::Tensor> copies;
        for (const at::Tensor& w : later.memory) copies.push_back(w.clone());
        std::thread([&] { finish_record(b.record, copies); }).join();
      } else {
        finish_record(b.record, later.memory);
      }
      CHECK_FALSE(static_cast<bool>(b.record.loss_after_later));
      CHECK_FALSE(b.record.loss_after.requires_grad());
      check_same_record(a.record, b.record);
      finish_record(b.record, later.memory);  // once: nothing left to do
      check_same_record(a.record, b.record);
    }
  }
}
