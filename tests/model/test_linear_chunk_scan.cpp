// The scan over many chunks (model/memory/linear_chunk_scan.cpp) against the per-chunk loop it
// replaces for whole chunks: the same tokens given one chunk per call (a call of one chunk never
// takes the scan) and in one call with the scan off, in float64. Outputs, end states, window rings
// and every parameter's gradient. The loop is itself checked against the sequential step in
// test_memory_forms.cpp.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "memory_test_support.h"
#include "model/memory/linear_chunk_scan.h"

using namespace memscope::model;
using namespace memscope::test;

namespace {

struct Run {
  at::Tensor y;
  MemoryState state;
  std::vector<at::Tensor> grads;
};

// `calls` splits the tokens: {T} is one call (the scan), {b, b, …} one chunk per call (the loop).
Run run(MemoryLayer& layer, const at::Tensor& x, int64_t chunk, const std::vector<int64_t>& calls) {
  layer->zero_grad();
  Run r;
  r.state = layer->initial_state(x.size(0));
  std::vector<at::Tensor> ys;
  int64_t pos = 0;
  for (const int64_t n : calls) {
    ys.push_back(layer->forward(x.slice(1, pos, pos + n), r.state, chunk).y);
    pos += n;
  }
  r.y = at::cat(ys, 1);
  torch::manual_seed(3);
  at::Tensor loss =
      (r.y * torch::randn_like(r.y)).sum() + (r.state.memory[0] * torch::randn_like(r.state.memory[0])).sum();
  if (r.state.momentum[0].defined())
    loss = loss + (r.state.momentum[0] * torch::randn_like(r.state.momentum[0])).sum();
  loss.backward();
  for (const auto& p : layer->parameters())
    r.grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return r;
}

}  // namespace

TEST_CASE("linear chunk scan: many chunks at once equal one chunk per call, gradients included", "[model]") {
  const std::vector<std::vector<std::string>> rules{
      {"memory.structure=linear"},
      {"memory.structure=linear", "memory.inner.clip=0.05", "memory.read=before-write"},
      {"memory.structure=linear", "memory.window.c=3", "memory.window.gamma=decay", "memory.retention=none"},
      {"memory.structure=linear", "memory.window.c=2", "memory.window.gamma=gated", "memory.conv=false",
       "memory.inner.normalize=true"},
      {"memory.structure=linear", "memory.optimiser=dgd", "memory.momentum.enabled=false",
       "memory.bias=huber"},
      {"memory.structure=linear", "memory.feature_map.kind=poly", "memory.bias=lp"}};
  for (const auto& sets : rules) {
    std::string described;
    for (const auto& s : sets) described += s + " ";
    INFO(described);
    MemoryLayer layer = make_layer(test_rule("titans-lmm", sets), 16, 2, torch::kFloat64);
    layer->set_fused_step(false);  // the loop's ATen form on both sides, on every device
    layer->set_chunk_scan(true);   // unset, the CPU takes the loop
    const at::Tensor x = make_input(3, 20, 16, torch::kFloat64);
    const int64_t chunk = 4;
    // The scan takes all five chunks of the one call; the per-chunk calls never take it.
    REQUIRE(linear_chunk_scan_tokens(layer->rule(), layer->initial_state(3), 20, chunk, false) == 20);
    REQUIRE(linear_chunk_scan_tokens(layer->rule(), layer->initial_state(3), chunk, chunk, false) == 0);
    const Run scan = run(layer, x, chunk, {20});
    const Run loop = run(layer, x, chunk, {4, 4, 4, 4, 4});
    layer->set_chunk_scan(false);
    const Run one_call_loop = run(layer, x, chunk, {20});
    layer->set_chunk_scan(true);
    CHECK(relative_error(one_call_loop.y, loop.y) < 1e-12);
    CHECK(relative_error(scan.y, loop.y) < 1e-12);
    CHECK(relative_error(scan.state.memory[0], loop.state.memory[0]) < 1e-12);
    if (loop.state.momentum[0].defined())
      CHECK(relative_error(scan.state.momentum[0], loop.state.momentum[0]) < 1e-12);
    CHECK(scan.state.tokens == loop.state.tokens);
    CHECK(scan.state.anchor.empty());
    CHECK(torch::equal(scan.state.ring_phi, loop.state.ring_phi));
    CHECK(torch::equal(scan.state.ring_gamma, loop.state.ring_gamma));
    CHECK(check_gradients_close(scan.grads, loop.grads, 1e-10) >= 6);
  }
}

TEST_CASE(
    "linear chunk scan: a call off a chunk boundary, or with a partial chunk, takes the loop for the rest",
    "[model]") {
  MemoryLayer layer =
      make_layer(test_rule("titans-lmm", {"memory.structure=linear"}), 16, 2, torch::kFloat64);
  layer->set_fused_step(false);
  layer->set_chunk_scan(true);
  const at::Tensor x = make_input(2, 23, 16, torch::kFloat64);
  // 3 tokens (an open chunk), then 20 (the loop throughout: the call starts off a boundary),
  // against 3, 1 (closing the chunk) and 19 (four whole chunks scanned, then 3 by the loop).
  MemoryState a = layer->initial_state(2), b = layer->initial_state(2);
  CHECK(linear_chunk_scan_tokens(layer->rule(), a, 20, 4, false) == 20);
  const at::Tensor ya =
      at::cat({layer->forward(x.slice(1, 0, 3), a, 4).y, layer->forward(x.slice(1, 3), a, 4).y}, 1);
  CHECK(linear_chunk_scan_tokens(layer->rule(), a, 4, 4, false) == 0);  // 23 tokens in: off a boundary
  std::vector<at::Tensor> yb;
  int64_t pos = 0;
  for (const int64_t n : {3, 1, 19}) {
    yb.push_back(layer->forward(x.slice(1, pos, pos + n), b, 4).y);
    pos += n;
  }
  CHECK(relative_error(at::cat(yb, 1), ya) < 1e-12);
  CHECK(relative_error(b.memory[0], a.memory[0]) < 1e-12);
  CHECK(b.tokens == 23);
  CHECK(b.anchor_chunk == 4);  // 23 is not a multiple of 4: the last chunk is open, its gradient point kept
}

TEST_CASE("linear chunk scan: unset, it runs off the CPU only", "[model]") {
  // On the CPU the loop measured faster in a whole training step, so the default keeps it there;
  // a GPU takes the scan. The default's result is the same bits as the form it picks.
  MemoryLayer layer =
      make_layer(test_rule("titans-lmm", {"memory.structure=linear"}), 16, 2, torch::kFloat64);
  layer->set_fused_step(false);
  const at::Tensor x = make_input(2, 16, 16, torch::kFloat64);
  auto y_of = [&](std::optional<bool> scan) {
    layer->set_chunk_scan(scan);
    MemoryState s = layer->initial_state(2);
    return layer->forward(x, s, 4).y;
  };
  const at::Tensor by_default = y_of(std::nullopt);
  const at::Tensor picked = y_of(!test_device().is_cpu());
  CHECK(torch::equal(by_default, picked));
}
