// The fused chunkwise form of the linear l2 rules at c = 1 (model/memory/fused_linear_chunkwise.cpp)
// against the ATen chunkwise form it replaces (MemoryLayerImpl::set_fused_step(false)): outputs,
// end states and every outer gradient through autograd of the ATen form, in float64, on each rule
// variant it takes; float32 outputs to rounding. Every case checks that the fused function really
// ran (its node in the graph). The finite-difference gradcheck of test_memory_gradients.cpp runs
// Titans' linear rule and deltanet through it as well.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "memory_test_support.h"

using namespace memscope::model;
using namespace memscope::test;

namespace {

// Titans' rule on a linear memory (the titans-lmm preset's memory is an MLP).
const std::string kLinear = "memory.structure=linear";

// Whether y came out of the fused function (its autograd node), or the ATen form.
bool from_fused(const at::Tensor& y) {
  return y.grad_fn() && y.grad_fn()->name().find("LinearChunkwise") != std::string::npos;
}

struct Run {
  at::Tensor y, m_end, s_end;
  std::vector<at::Tensor> grads;  // d loss / d parameter, in named_parameters() order
  size_t anchors = 0;
};

// Two calls (T1 then T − T1 tokens) of the chunkwise form, a loss on the outputs and the end
// state, and its backward into every parameter.
Run run(MemoryLayer& layer, bool fused, const at::Tensor& x, int64_t chunk, int64_t split) {
  layer->set_fused_step(fused);
  layer->zero_grad();
  MemoryState state = layer->initial_state(x.size(0));
  const at::Tensor y1 = layer->forward(x.slice(1, 0, split), state, chunk).y;
  // The first call starts on a chunk boundary, so it takes the fused form when asked to.
  CHECK(from_fused(y1) == fused);
  const at::Tensor y2 = layer->forward(x.slice(1, split), state, chunk).y;
  Run r;
  r.y = at::cat({y1, y2}, 1);
  r.m_end = state.memory[0];
  r.s_end = state.momentum[0];
  r.anchors = state.anchor.size();
  torch::manual_seed(5);
  const at::Tensor loss = (r.y * torch::randn_like(r.y)).sum() + (r.m_end * torch::randn_like(r.m_end)).sum() +
                          (r.s_end * torch::randn_like(r.s_end)).sum();
  loss.backward();
  for (const auto& p : layer->parameters()) r.grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  layer->set_fused_step(true);
  return r;
}


}  // namespace

TEST_CASE("fused chunkwise: outputs, end states and outer gradients equal the ATen form's in float64", "[model]") {
  ScopedCpuDevice cpu;  // the fused kernels are CPU code
  if (!memscope::test::cpu_kernels_testable()) return;
  struct Case {
    const char* preset;
    std::vector<std::string> set;
  };
  for (const Case& c : {Case{"titans-lmm", {kLinear}}, Case{"titans-lmm", {kLinear, "memory.inner.clip=0.05"}},
                        Case{"titans-lmm", {kLinear, "memory.read=before-write", "memory.retention=none"}},
                        Case{"titans-lmm", {kLinear, "memory.window.gamma=gated", "memory.conv=false"}},
                        Case{"titans-lmm", {kLinear, "memory.feature_map.kind=poly", "memory.inner.normalize=true"}},
                        Case{"deltanet", {}}, Case{"deltanet", {"memory.inner.clip=0.05", "memory.read=before-write"}}}) {
    MemoryLayer layer = make_layer(test_rule(c.preset, c.set), 16, 2, torch::kFloat64);
    const at::Tensor x = make_input(3, 13, 16, torch::kFloat64);
    // chunk 4 over 13 tokens: the first call (8 tokens) ends on a boundary, the second's last chunk is open.
    for (const auto& [chunk, split] : {std::pair<int64_t, int64_t>{1, 5}, {4, 8}, {5, 10}, {16, 7}}) {
      std::string sets;
      for (const auto& s : c.set) sets += s + " ";
      INFO(c.preset << " " << sets << "chunk " << chunk);
      const Run general = run(layer, false, x, chunk, split);
      const Run fused = run(layer, true, x, chunk, split);
      CHECK(relative_error(fused.y, general.y) < 1e-12);
      CHECK(relative_error(fused.m_end, general.m_end) < 1e-12);
      CHECK(relative_error(fused.s_end, general.s_end) < 1e-12);
      CHECK(fused.anchors == general.anchors);
      CHECK(check_gradients_close(fused.grads, general.grads, 1e-10) >= 6);
    }
  }
}

TEST_CASE("fused chunkwise: float32 outputs equal the ATen form's to rounding, and the clip bites", "[model]") {
  ScopedCpuDevice cpu;  // the fused kernels are CPU code
  for (const char* clip : {"memory.inner.clip=0", "memory.inner.clip=0.05"}) {
    MemoryLayer layer = make_layer(test_rule("titans-lmm", {kLinear, clip}), 64, 4, torch::kFloat32);
    const at::Tensor x = make_input(4, 40, 64, torch::kFloat32);
    torch::NoGradGuard no_grad;
    MemoryState a = layer->initial_state(4), b = layer->initial_state(4);
    layer->set_fused_step(false);
    const at::Tensor general = layer->forward(x, a, 4).y;
    layer->set_fused_step(true);
    const at::Tensor fused = layer->forward(x, b, 4).y;
    INFO(clip);
    CHECK(relative_error(fused, general) < 2e-5);
    CHECK(relative_error(b.memory[0], a.memory[0]) < 2e-5);
    // The bound changes the run (so the clipped case above tests the clip, not a no-op).
    if (std::string(clip) != "memory.inner.clip=0") {
      MemoryLayer unclipped = make_layer(test_rule("titans-lmm", {kLinear}), 64, 4, torch::kFloat32);
      MemoryState u = unclipped->initial_state(4);
      CHECK(relative_error(unclipped->forward(x, u, 4).y, fused) > 1e-3);
    }
  }
}

TEST_CASE("fused chunkwise: a double backward is refused in one line, not answered wrongly", "[model]") {
  ScopedCpuDevice cpu;  // the fused kernels are CPU code
  if (!memscope::test::cpu_kernels_testable()) return;
  MemoryLayer layer = make_layer(test_rule("titans-lmm", {kLinear}), 16, 2, torch::kFloat64);
  const at::Tensor x = make_input(2, 6, 16, torch::kFloat64).requires_grad_(true);
  MemoryState state = layer->initial_state(2);
  const at::Tensor y = layer->forward(x, state, 2).y;
  REQUIRE(from_fused(y));
  const at::Tensor loss = y.pow(2).sum();
  CHECK_THROWS_WITH(torch::autograd::grad({loss}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true),
                    Catch::Contains("no double backward"));
  // The first derivative is still there, and the ATen form gives the second.
  CHECK(torch::autograd::grad({loss}, {x}, {}, /*retain_graph=*/true)[0].abs().sum().item<double>() > 0);
  layer->set_fused_step(false);
  MemoryState general = layer->initial_state(2);
  const at::Tensor g = torch::autograd::grad({layer->forward(x, general, 2).y.pow(2).sum()}, {x}, {}, true, true)[0];
  CHECK(g.requires_grad());
}
