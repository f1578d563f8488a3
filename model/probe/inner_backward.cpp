#include "model/probe/inner_backward.h"

#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>

#include "model/nn/language_model.h"

namespace memscope::model {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Where a captured state tensor's gradient norm goes.
struct Slot {
  size_t token;
  size_t offset;  // into memory[token] (per head: offset + h·stride) or selfmod[token]
  int64_t stride;  // 0: one value (selfmod, its square added to the cell); else the head stride
  // selfmod only: the five memories' stack (SelfModState::stacked), one cell per memory from offset
  bool stacked = false;
};

}  // namespace

InnerBackward inner_backward(const LanguageModelImpl& model, const at::Tensor& tokens, const at::Tensor& targets,
                             const InnerBackwardOptions& options) {
  at::AutoGradMode grad_on(true);
  const int64_t T = tokens.size(0);
  InnerBackward out;
  const bool has_memory = model.config().has_memory();
  out.layers = has_memory ? model.layers() : 0;
  out.heads = has_memory ? model.config().memory_heads : 0;
  out.weights = has_memory ? static_cast<int64_t>(model.block(0)->memory->memory_names().size()) : 0;
  std::vector<int64_t> hope;  // the blocks with self-modifying memories
  for (int64_t l = 0; l < model.layers(); ++l)
    if (model.block(l)->selfmod) hope.push_back(l);
  out.hope_layers = static_cast<int64_t>(hope.size());
  const size_t cells = static_cast<size_t>(out.layers * out.heads * out.weights * 3);

  LmState state = model.initial_state(1);
  std::vector<at::Tensor> inputs;
  std::vector<Slot> slots;
  auto capture = [&](const at::Tensor& t, Slot slot) {
    if (!t.defined() || !t.requires_grad()) return;  // not reached by the outer loss (e.g. dgd's S)
    inputs.push_back(t);
    slots.push_back(slot);
  };
  at::Tensor ce = at::zeros({}, model.embedding.options());
  const at::Tensor host_targets = targets.to(at::kCPU, at::kLong).contiguous();  // one transfer, not one per token
  const int64_t* target_of = host_targets.data_ptr<int64_t>();
  for (int64_t t = 0; t < T; ++t) {
    const LmStepOutput step = model.step(tokens.narrow(0, t, 1), state, options.chunk);
    const int64_t target = target_of[t];
    if (target >= 0) ce = ce - at::log_softmax(step.logits[0], 0)[target];
    const auto token = static_cast<size_t>(t);
    out.memory.emplace_back(cells, kNaN);
    out.selfmod.emplace_back(static_cast<size_t>(out.hope_layers * 5), 0.0f);
    for (int64_t l = 0; l < out.layers; ++l) {
      const MemoryState& m = state.blocks[static_cast<size_t>(l)].memory;
      const auto& record = step.records[static_cast<size_t>(l)];
      for (int64_t w = 0; w < out.weights; ++w) {
        const auto cell = [&](int metric) {  // [layers, heads, weights, 3] at head 0
          return static_cast<size_t>(((l * out.heads) * out.weights + w) * 3 + metric);
        };
        const int64_t stride = out.weights * 3;
        capture(m.memory[static_cast<size_t>(w)], {token, cell(0), stride});
        capture(m.momentum[static_cast<size_t>(w)], {token, cell(1), stride});
        if (record && static_cast<int64_t>(record->ns_input.size()) > w)
          capture(record->ns_input[static_cast<size_t>(w)], {token, cell(2), stride});
      }
    }
    for (size_t i = 0; i < hope.size(); ++i) {
      const SelfModState& selfmod = state.blocks[static_cast<size_t>(hope[i])].selfmod;
      // After the chunkwise form the memories are slices of its stack, and the next token reads the
      // stack, not the slices: the stack is what carries every later use of W_t.
      if (slices_of(selfmod.stacked, selfmod.weights)) {
        for (const auto& w : selfmod.stacked) capture(w, {token, i * 5, 0, true});
        continue;
      }
      for (size_t k = 0; k < selfmod.weights.size(); ++k)
        for (const auto& w : selfmod.weights[k]) capture(w, {token, i * 5 + k, 0});
    }
  }
  at::Tensor loss = ce / options.targets;
  const at::Tensor aux = model.take_aux_loss(state);
  if (aux.defined() && options.aux_weight > 0) loss = loss + options.aux_weight * aux / options.aux_tokens;
  out.loss = loss.item<double>();

  // One backward; autograd::grad leaves the parameters' .grad alone.
  const auto grads = torch::autograd::grad({loss}, inputs, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                           /*allow_unused=*/true);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Slot& s = slots[i];
    const at::Tensor& g = grads[i];
    if (s.stride == 0) {  // selfmod: W1 and W2 of one memory share a cell (squares summed, root below)
      if (!g.defined()) continue;
      if (s.stacked) {  // [1,5,a,b]: one square per memory
        const at::Tensor sq = g[0].to(at::kDouble).pow(2).sum({-2, -1}).cpu().contiguous();
        for (int64_t k = 0; k < sq.size(0); ++k)
          out.selfmod[s.token][s.offset + static_cast<size_t>(k)] +=
              static_cast<float>(sq.data_ptr<double>()[k]);
      } else {
        out.selfmod[s.token][s.offset] += static_cast<float>(g.to(at::kDouble).pow(2).sum().item<double>());
      }
      continue;
    }
    // [1,H,a,b] → one norm per head.
    const at::Tensor norms = g.defined() ? at::linalg_vector_norm(g[0].to(at::kDouble), 2, {-2, -1}, false).cpu().contiguous()
                                         : at::zeros({out.heads}, at::kDouble);
    const double* norm_of = norms.data_ptr<double>();
    for (int64_t h = 0; h < out.heads; ++h)
      out.memory[s.token][s.offset + static_cast<size_t>(h * s.stride)] = static_cast<float>(norm_of[h]);
  }
  for (auto& row : out.selfmod)
    for (auto& v : row) v = std::sqrt(v);
  return out;
}

}  // namespace memscope::model
