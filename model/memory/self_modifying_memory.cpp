#include "model/memory/self_modifying_memory.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/torch.h>

#include <cmath>

#include "model/memory/causal_conv.h"
#include "model/memory/dgd_preconditioner.h"
#include "model/memory/gate_bias.h"
#include "model/memory/inner_clip.h"
#include "model/memory/mlp_memory.h"
#include "model/util/autocast.h"
#include "model/util/errors.h"

namespace memscope::model {

const char* to_string(SelfModMemory m) {
  switch (m) {
    case SelfModMemory::Key: return "k";
    case SelfModMemory::Value: return "v";
    case SelfModMemory::Lr: return "eta";
    case SelfModMemory::Retain: return "alpha";
    case SelfModMemory::Main: return "memory";
  }
  return "?";
}

namespace {

using MemoryWeights = std::array<std::vector<at::Tensor>, kSelfModCount>;

// f over the weights and their stack, where they were slices of the stack, slices of f(stack): a
// clone that broke them apart would make the next chunk stack them again.
template <typename F>
void map_weights(MemoryWeights& weights, std::array<at::Tensor, 2>& stack, F f) {
  const bool sliced = slices_of(stack, weights);
  for (auto& t : stack)
    if (t.defined()) t = f(t);
  for (int m = 0; m < kSelfModCount; ++m)
    for (size_t i = 0; i < weights[m].size(); ++i)
      weights[m][i] = sliced ? stack[i].narrow(1, m, 1) : f(weights[m][i]);
}

template <typename F>
SelfModState map_tensors(const SelfModState& s, F f) {
  SelfModState out = s;
  map_weights(out.weights, out.stacked, f);
  map_weights(out.anchor, out.anchor_stacked, f);
  if (out.aux.defined()) out.aux = f(out.aux);
  for (at::Tensor* t : {&out.last_error, &out.last_retain, &out.last_lr, &out.last_precond, &out.conv})
    if (t->defined()) *t = f(*t);
  return out;
}

at::Tensor unit(const at::Tensor& z) { return z / z.norm(2, -1, true).clamp_min(1e-12); }

}  // namespace

bool slices_of(const std::array<at::Tensor, 2>& stack, const MemoryWeights& w) {
  for (size_t i = 0; i < stack.size(); ++i) {
    const at::Tensor& whole = stack[i];
    if (!whole.defined() || whole.dim() < 2 || whole.size(1) != kSelfModCount) return false;
    for (int m = 0; m < kSelfModCount; ++m) {
      if (w[m].size() != stack.size()) return false;
      const at::Tensor& t = w[m][i];
      // whole.narrow(1, m, 1), told without making it (this runs at every token): the same storage,
      // offset, strides and sizes but axis 1; and on the same side of any cut in the graph (a
      // detached slice is not one).
      if (!t.defined() || !t.is_alias_of(whole) || t.requires_grad() != whole.requires_grad() ||
          t.storage_offset() != whole.storage_offset() + m * whole.stride(1) ||
          t.strides() != whole.strides() || t.dim() != whole.dim())
        return false;
      for (int64_t k = 0; k < t.dim(); ++k)
        if (t.size(k) != (k == 1 ? 1 : whole.size(k))) return false;
    }
  }
  return true;
}

std::array<at::Tensor, 2> stack_memories(const MemoryWeights& w, const std::array<at::Tensor, 2>& stack) {
  if (slices_of(stack, w)) return stack;
  std::array<at::Tensor, 2> out;
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<at::Tensor> parts;
    for (int m = 0; m < kSelfModCount; ++m) parts.push_back(w[m][i]);
    out[i] = at::cat(parts, 1);
  }
  return out;
}

bool SelfModState::continues_chunk(int64_t chunk) const {
  return chunk > 1 && tokens % chunk != 0 && anchor_chunk == chunk && !anchor[0].empty();
}

SelfModState SelfModState::clone() const {
  return map_tensors(*this, [](const at::Tensor& t) { return t.clone(); });
}

SelfModState SelfModState::detached() const {
  return map_tensors(*this, [](const at::Tensor& t) { return t.detach(); });
}

SelfModifyingMemoryImpl::SelfModifyingMemoryImpl(SelfModOptions options) : options_(options) {
  const int64_t d = options_.d_model, hidden = 4 * d;
  if (d < 1) throw UserError("self-modifying memory: d_model must be positive");
  w_q = register_parameter("w_q", torch::randn({d, d}) / std::sqrt(static_cast<double>(d)));
  for (int m = 0; m < kSelfModCount; ++m) {
    const std::string p = std::string("M_") + to_string(static_cast<SelfModMemory>(m)) + "_";
    w1_0[m] = register_parameter(p + "w1_0", torch::randn({1, d, hidden}) / std::sqrt(static_cast<double>(hidden)));
    w2_0[m] = register_parameter(p + "w2_0", torch::randn({1, hidden, d}) / std::sqrt(static_cast<double>(d)));
    ln_weight[m] = register_parameter(p + "ln_weight", torch::ones({1, d}));
    ln_bias[m] = register_parameter(p + "ln_bias", torch::zeros({1, d}));
  }
  b_lr = register_parameter("b_lr", torch::full({d}, gate_bias::kLr));
  b_retain = register_parameter("b_retain", torch::full({d}, gate_bias::kRetain));
  if (options_.conv) {
    // Near the identity (last tap 1), as the memory layer's conv starts.
    at::Tensor taps = torch::randn({3 * d, 4}) * 0.1;
    taps.select(1, 3).fill_(1.0);
    conv_weight = register_parameter("conv_weight", taps);
  }
}

SelfModState SelfModifyingMemoryImpl::initial_state(int64_t batch) const {
  SelfModState s;
  for (int m = 0; m < kSelfModCount; ++m)
    for (const auto& w0 : {w1_0[m], w2_0[m]}) {
      auto sizes = w0.sizes().vec();
      sizes.insert(sizes.begin(), batch);
      s.weights[m].push_back(w0.unsqueeze(0).expand(sizes).clone());
    }
  s.aux = at::zeros({batch}, w_q.options());
  if (options_.conv) s.conv = at::zeros({batch, 3, 3 * options_.d_model}, w_q.options());
  return s;
}

at::Tensor SelfModifyingMemoryImpl::read_weights(SelfModMemory m, const std::vector<at::Tensor>& w,
                                                 const at::Tensor& z) const {
  const int i = static_cast<int>(m);
  // z [B,d] → [B,1,1,d]: one head, one token.
  const at::Tensor zz = z.unsqueeze(1).unsqueeze(2);
  return mlp_pass(zz, w[0], w[1], ln_weight[i].to(z.dtype()), ln_bias[i].to(z.dtype())).y.squeeze(2).squeeze(1);
}

at::Tensor SelfModifyingMemoryImpl::gate(const at::Tensor& logits) const {
  if (!options_.shared_gates) return at::sigmoid(logits);
  return at::sigmoid(logits.mean(-1, /*keepdim=*/true)).expand_as(logits);
}

at::Tensor SelfModifyingMemoryImpl::read(SelfModMemory m, const SelfModState& state, const at::Tensor& z) const {
  return read_weights(m, state.weights[static_cast<int>(m)], z);
}

at::Tensor SelfModifyingMemoryImpl::step(const at::Tensor& input, SelfModState& state, SelfModRecord* record,
                                         int64_t chunk) const {
  const int64_t d = options_.d_model;
  TORCH_CHECK(input.dim() == 2 && input.size(1) == d, "self-modifying memory: expected x_t of shape [B,", d,
              "], got ", input.sizes());
  const AutocastOff state_precision(input.device().type());  // as forward (self_modifying_chunkwise.cpp)
  const at::Tensor x_t = state_precision.was_on() ? input.to(state.weights[0][0].scalar_type()) : input;
  TORCH_CHECK(chunk >= 1, "self-modifying memory: chunk size must be at least 1, got ", chunk);
  // Everything the step's writes read comes from the memories before its writes; with chunk b > 1,
  // from the memories at the chunk start (SPEC §9), carried across calls in the anchor.
  const bool continuing = state.continues_chunk(chunk);
  const std::array<std::vector<at::Tensor>, kSelfModCount> reads = continuing ? state.anchor : state.weights;
  auto read_at = [&](SelfModMemory m, const at::Tensor& z) { return read_weights(m, reads[static_cast<int>(m)], z); };
  at::Tensor q_in = at::matmul(x_t, w_q.t()), k_in = read_at(SelfModMemory::Key, x_t),
             v_in = read_at(SelfModMemory::Value, x_t);
  if (options_.conv) {
    const at::Tensor window = at::cat({state.conv.to(x_t.dtype()), at::cat({q_in, k_in, v_in}, -1).unsqueeze(1)}, 1);
    const at::Tensor mixed = causal_depthwise_conv(window, conv_weight).squeeze(1);  // [B,3d]
    state.conv = window.slice(1, 1, 4);
    const auto parts = mixed.chunk(3, -1);
    q_in = parts[0];
    k_in = parts[1];
    v_in = parts[2];
  }
  const at::Tensor k = unit(k_in);
  const at::Tensor v = v_in;
  const at::Tensor eta = options_.max_lr * gate(read_at(SelfModMemory::Lr, x_t) + b_lr);
  const at::Tensor alpha = gate(read_at(SelfModMemory::Retain, x_t) + b_retain);
  const at::Tensor q = unit(q_in);

  // seed 004 change 1: the auxiliary retrieval loss gives M_k (first term) and M_v (second) an
  // outer gradient that does not depend on differentiating through the inner updates.
  const at::Tensor retrieved = read_at(SelfModMemory::Main, k);
  state.aux = state.aux + (retrieved - v.detach()).pow(2).mean(-1) + (retrieved.detach() - v).pow(2).mean(-1);

  std::array<at::Tensor, kSelfModCount> target;
  for (int m = 0; m < kSelfModCount; ++m) {
    const auto mem = static_cast<SelfModMemory>(m);
    // v̂_□ = sg(M_□(v_t)): self-generated; the main memory stores v_t itself.
    target[m] = mem == SelfModMemory::Main ? v : read_at(mem, v).detach();
  }

  bool differentiable = at::GradMode::is_enabled() && k.requires_grad();
  for (const auto& w : reads) differentiable = differentiable || (at::GradMode::is_enabled() && w[0].requires_grad());
  std::vector<at::Tensor> grads;
  std::array<at::Tensor, kSelfModCount> error;
  {
    at::AutoGradMode grad_on(true);
    std::vector<at::Tensor> leaves;
    for (const auto& w : reads)
      for (const auto& t : inner_gradient_inputs(w, differentiable)) leaves.push_back(t);
    const at::Tensor key = differentiable ? k : k.detach();
    at::Tensor total;
    for (int m = 0; m < kSelfModCount; ++m) {
      const at::Tensor tgt = differentiable ? target[m] : target[m].detach();
      const at::Tensor out = read_weights(static_cast<SelfModMemory>(m), {leaves[2 * m], leaves[2 * m + 1]}, key);
      // ½‖M_□(k) − v̂_□‖²/d: normalised by its element count (seed 004 change 6).
      error[m] = 0.5 * (out - tgt).pow(2).sum(-1) / static_cast<double>(d);
      // Each memory's loss touches only its own weights, so one call gives every memory's gradient.
      total = total.defined() ? total + error[m].sum() : error[m].sum();
    }
    grads = torch::autograd::grad({total}, leaves, {}, /*retain_graph=*/differentiable, /*create_graph=*/differentiable);
    if (!differentiable) {
      for (auto& g : grads) g = g.detach();
      for (auto& e : error) e = e.detach();
    }
  }

  // dgd with the diagonal preconditioner at α_t, k_t and η_t, broadcast over W's head axis; the
  // projection memories write with model.hope.self_lr_scale·η_t.
  const at::Tensor k_sq = k.pow(2).unsqueeze(1), a = alpha.unsqueeze(1), e = eta.unsqueeze(1);
  for (int m = 0; m < kSelfModCount; ++m) {
    std::vector<at::Tensor> g{grads[2 * m], grads[2 * m + 1]};
    const at::Tensor factor = clip_factor(g, options_.inner_clip);
    for (auto& t : g) t = t * factor;
    const bool projection = static_cast<SelfModMemory>(m) != SelfModMemory::Main;
    state.weights[m] = dgd_mlp_update(state.weights[m], g, k_sq, a, projection ? e * options_.self_lr_scale : e);
  }
  state.tokens += 1;
  if (chunk > 1 && state.tokens % chunk != 0) {
    if (!continuing) {
      state.anchor = reads;
      // Kept only where the reads are its slices, so that no stale stack stays alive.
      state.anchor_stacked = slices_of(state.stacked, reads) ? state.stacked : std::array<at::Tensor, 2>{};
    }
    state.anchor_chunk = chunk;
  } else {
    state.anchor = {};
    state.anchor_stacked = {};
    state.anchor_chunk = 0;
  }
  state.stacked = {};  // the weights are new tensors now: the chunkwise form's stack is stale
  state.last_error = at::stack({error[0], error[1], error[2], error[3], error[4]}, -1).detach();
  state.last_retain = alpha.detach();
  state.last_lr = eta.detach();
  state.last_precond = (alpha - eta * k.pow(2)).detach();
  const at::Tensor y = read(SelfModMemory::Main, state, q);  // read after the write

  if (record) {
    record->k = k;
    record->v = v;
    record->q = q;
    record->retain = alpha;
    record->lr = eta;
    record->target = target;
    record->target_error = error;
  }
  return y;
}

}  // namespace memscope::model
