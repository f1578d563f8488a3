// The sequential step: one token, exact, the reference every other form is tested against
// (SPEC §9). Written per token and plainly; the chunkwise form shares none of its update code.
#include <torch/csrc/autograd/autograd.h>

#include "model/memory/attentional_bias.h"
#include "model/memory/dgd_preconditioner.h"
#include "model/memory/inner_clip.h"
#include "model/memory/memory_layer.h"
#include "model/memory/mlp_memory.h"
#include "model/memory/newton_schulz.h"
#include "model/memory/retention.h"

namespace memscope::model {

namespace {

at::Tensor as_matrix_scale(const at::Tensor& gate) { return gate.unsqueeze(-1).unsqueeze(-1); }  // [B,H,1,1]

// L_t(M_t): the window read again from the memory after the write, as step()'s read() and
// window_loss() compute it. ln_w and ln_b (the MLP read's LN) are undefined for a linear memory.
at::Tensor window_loss_after(const std::vector<at::Tensor>& after, const at::Tensor& window_phi,
                             const at::Tensor& window_v, const at::Tensor& loss_weights,
                             const at::Tensor& window_delta, const MemoryRule& rule, const at::Tensor& ln_w,
                             const at::Tensor& ln_b) {
  const at::Tensor y = ln_w.defined() ? mlp_pass(window_phi, after[0], after[1], ln_w, ln_b).y
                                      : at::matmul(window_phi, after[0].transpose(-1, -2));
  return (loss_weights * bias_loss(y, window_v, rule, window_delta)).sum(-1);
}

}  // namespace

StepOutput MemoryLayerImpl::step(const at::Tensor& x_t, MemoryState& state, int64_t chunk, StepDetail detail) const {
  const bool recording = detail != StepDetail::OutputOnly;
  if (fused_step_applies(x_t, state, chunk)) return fused_step(x_t, state, detail, chunk);
  TORCH_CHECK(x_t.dim() == 2, "memory step: expected x_t of shape [B,D], got ", x_t.sizes());
  TORCH_CHECK(chunk >= 1, "memory step: chunk size must be at least 1, got ", chunk);
  ProjectedTokens p = project(x_t.unsqueeze(1), state);
  auto token = [](const at::Tensor& t) { return t.select(1, 0); };
  const at::Tensor phi_k = token(p.phi_k), phi_q = token(p.phi_q), v = token(p.v);
  const at::Tensor alpha = token(p.retain), eta = token(p.lr), beta = token(p.momentum);
  const at::Tensor delta = token(p.delta);

  // The Omega window of SPEC §4: the ring's c−1 older tokens and this one, oldest first (c = 1:
  // this token alone, without concatenating an empty ring).
  auto window_of = [&](const at::Tensor& ring, const at::Tensor& now) {
    return rule_.window > 1 ? at::cat({ring, now.unsqueeze(2)}, 2) : now.unsqueeze(2);
  };
  const at::Tensor window_phi = window_of(state.ring_phi, phi_k);  // [B,H,c,d_φ]
  const at::Tensor window_v = window_of(state.ring_v, v);          // [B,H,c,d_v]
  const at::Tensor window_gamma = window_of(state.ring_gamma, token(p.gamma));
  const at::Tensor weights = window_gamma * position_weights(window_gamma.options());  // γ_{t,i}
  // The inner loss and its gradient carry memory.inner.normalize's 1/d_v; γ itself does not.
  const at::Tensor loss_weights = weights * inner_loss_scale(rule_, head_dim_);
  const at::Tensor window_delta = delta.unsqueeze(-1);  // L_t uses δ_t for its whole window

  const bool linear = rule_.structure == Structure::Linear;
  auto read = [&](const std::vector<at::Tensor>& mem, const at::Tensor& z) {  // z [B,H,n,d_φ]
    return linear ? at::matmul(z, mem[0].transpose(-1, -2)) : mlp_read(z, mem[0], mem[1]);
  };
  auto window_loss = [&](const at::Tensor& y) {
    return (loss_weights * bias_loss(y, window_v, rule_, window_delta)).sum(-1);
  };

  StepRecord rec;
  if (recording) {
    rec.phi_k = phi_k;
    rec.phi_q = phi_q;
    rec.v = v;
    rec.retain = alpha;
    rec.lr = eta;
    rec.momentum = beta;
    rec.delta = delta;
    rec.gamma = weights;
    rec.token_gamma = token(p.gamma);
  }
  const bool per_feature = rule_.dgd_per_feature;
  if (per_feature) {  // the update reads these
    rec.retain_feature = token(p.retain_feature);
    rec.lr_feature = token(p.lr_feature);
  }

  const std::vector<at::Tensor> before = state.memory;
  // SPEC §9: with chunk b > 1 every gradient of a chunk is taken at the chunk-start memory, as the
  // chunkwise form does (chunks at multiples of b from the stream start, the anchor carried across
  // calls exactly as forward() carries it). Everything else (momentum, retention, the read) runs
  // on the current memory. b = 1 is the exact step. loss_before is the inner loss at that point.
  const bool continuing = chunk > 1 && state.tokens % chunk != 0 && state.anchor_chunk == chunk && !state.anchor.empty();
  const std::vector<at::Tensor> gradient_point = continuing ? state.anchor : before;
  if (linear) {
    // SPEC §4: g_t = Σ_i γ_{t,i} ∂ℓ/∂y(M φ_i, v_i) φ_iᵀ (analytic).
    at::Tensor y = read(gradient_point, window_phi);
    if (recording) rec.loss_before = window_loss(y);
    at::Tensor psi = bias_grad(y, window_v, rule_, window_delta) * loss_weights.unsqueeze(-1);
    rec.gradient = {at::matmul(psi.transpose(-1, -2), window_phi)};
  } else {
    // SPEC §4: for MLP memory g_t = ∇_M L_t by autograd; with create_graph when training.
    const bool differentiable =
        at::GradMode::is_enabled() && (gradient_point[0].requires_grad() || gradient_point[1].requires_grad() ||
                                       window_phi.requires_grad() || loss_weights.requires_grad());
    at::AutoGradMode grad_on(true);
    std::vector<at::Tensor> leaves = gradient_point;
    if (!differentiable)
      for (auto& w : leaves) w = w.detach().requires_grad_(true);
    at::Tensor y = read(leaves, differentiable ? window_phi : window_phi.detach());
    at::Tensor psi = bias_grad(y, window_v, rule_, window_delta) * loss_weights.unsqueeze(-1);
    if (!differentiable) psi = psi.detach();
    rec.gradient = torch::autograd::grad({y}, leaves, {psi}, /*retain_graph=*/differentiable,
                                         /*create_graph=*/differentiable);
    if (recording) rec.loss_before = window_loss(differentiable ? y : y.detach());
    if (!differentiable)
      for (auto& g : rec.gradient) g = g.detach();
  }
  if (recording && !at::GradMode::is_enabled()) rec.loss_before = rec.loss_before.detach();
  if (rule_.inner_clip > 0.0) {
    const at::Tensor factor = clip_factor(rec.gradient, rule_.inner_clip);
    for (auto& g : rec.gradient) g = g * factor;
  }

  // SPEC §5: optimiser, then retention.
  std::vector<at::Tensor> after(before.size());
  if (!linear && rule_.optimiser == Optimiser::Dgd) {
    // dgd on MLP memory (SPEC §5, seed 004 change 2): the diagonal preconditioner p = α − η ⊙ k̄²,
    // k̄² the γ-weighted mean of φ_i² over the window's existing positions.
    const at::Tensor k_sq = window_key_squares(window_phi, weights);  // [B,H,d_φ]
    rec.key_squares = k_sq;
    const at::Tensor a = per_feature ? rec.retain_feature : alpha.unsqueeze(-1).expand_as(k_sq);
    const at::Tensor e = per_feature ? rec.lr_feature : eta.unsqueeze(-1).expand_as(k_sq);
    after = dgd_mlp_update(before, rec.gradient, k_sq, a, e);
  } else {
    for (size_t i = 0; i < before.size(); ++i) {
      const at::Tensor& g = rec.gradient[i];
      at::Tensor update;  // U_t, what is subtracted from the retained memory
      switch (rule_.optimiser) {
        case Optimiser::GdMomentum:
          state.momentum[i] = as_matrix_scale(beta) * state.momentum[i] + as_matrix_scale(eta) * g;
          update = state.momentum[i];
          break;
        case Optimiser::Muon: {
          state.momentum[i] = as_matrix_scale(beta) * state.momentum[i] + g;
          const at::Tensor ns_input = at::GradMode::is_enabled() ? state.momentum[i].view_as(state.momentum[i]) : state.momentum[i];
          at::Tensor orthogonal = newton_schulz(ns_input, rule_.ns);
          if (recording) {
            rec.ns_input.push_back(ns_input);
            rec.ns_output.push_back(orthogonal);
          }
          update = as_matrix_scale(eta) * orthogonal;
          break;
        }
        case Optimiser::Dgd:
          // M_t = M_{t−1}(αI − η φφᵀ) + η v φᵀ = α M_{t−1} − η g_t for the l2 bias and c = 1;
          // per feature, η scales g's columns: g_t diag(η_t).
          update = per_feature ? g * rec.lr_feature.unsqueeze(-2) : as_matrix_scale(eta) * g;
          break;
      }
      if (per_feature) {  // M_{t−1} diag(α_t) − g_t diag(η_t); validate() allows l2-decay and none only
        after[i] = before[i] * rec.retain_feature.unsqueeze(-2) - update;
        continue;
      }
      switch (rule_.retention) {
        case Retention::L2Decay:
        case Retention::None:  // α ≡ 1 comes from the gate
          after[i] = as_matrix_scale(alpha) * before[i] - update;
          break;
        case Retention::LqNormalize:
          state.latent = as_matrix_scale(alpha) * state.latent - update;
          after[i] = lq_normalize(state.latent, rule_.lq_q);
          break;
        case Retention::Softmax:
          after[i] = softmax_rows(as_matrix_scale(alpha) * softmax_latent(before[i]) - update);
          break;
      }
    }
  }
  state.memory = after;
  if (detail == StepDetail::RecordLater)
    rec.gradient.clear();  // the engine's record has none (memory_layer.h)
  if (recording) {
    const at::Tensor ln_w = linear ? at::Tensor() : ln_weight.to(window_phi.dtype());
    const at::Tensor ln_b = linear ? at::Tensor() : ln_bias.to(window_phi.dtype());
    if (detail == StepDetail::RecordLater && !at::GradMode::is_enabled()) {
      // On copies of what it reads, the rule included, so that it may run on another thread once
      // this step has returned (finish_record).
      rec.loss_after_later = [window_phi, window_v, loss_weights, window_delta, rule = rule_, ln_w,
                              ln_b](const std::vector<at::Tensor>& memory_after) {
        return window_loss_after(memory_after, window_phi, window_v, loss_weights, window_delta, rule, ln_w,
                                 ln_b);
      };
    } else {
      rec.loss_after =
          window_loss_after(after, window_phi, window_v, loss_weights, window_delta, rule_, ln_w, ln_b);
    }
  }

  // Read: the token sees the memory after its own write unless the rule says before.
  const auto& read_from = rule_.read == ReadOrder::AfterWrite ? after : before;
  at::Tensor y = read(read_from, phi_q.unsqueeze(2)).squeeze(2);

  if (rule_.window > 1) {
    state.ring_phi = window_phi.slice(2, 1);
    state.ring_v = window_v.slice(2, 1);
    state.ring_gamma = window_gamma.slice(2, 1);
  }
  state.tokens += 1;
  if (chunk > 1 && state.tokens % chunk != 0) {
    state.anchor = gradient_point;
    state.anchor_chunk = chunk;
  } else {
    state.anchor.clear();
    state.anchor_chunk = 0;
  }
  return {y, rec};
}

void finish_record(StepRecord& record, const std::vector<at::Tensor>& memory_after) {
  if (!record.loss_after_later) return;
  at::NoGradGuard no_grad;  // the step that left it ran without grad mode; this thread may not
  record.loss_after = record.loss_after_later(memory_after);
  record.loss_after_later = nullptr;
}

ForwardOutput MemoryLayerImpl::forward_sequential(const at::Tensor& x, MemoryState& state, bool record) const {
  const int64_t T = x.size(1);
  std::vector<at::Tensor> ys;
  std::vector<StepRecord> records;
  std::vector<std::vector<at::Tensor>> memories(state.memory.size()), momenta(state.memory.size());
  std::vector<at::Tensor> latents;
  for (int64_t t = 0; t < T; ++t) {
    StepOutput out = step(x.select(1, t), state, 1, record ? StepDetail::Record : StepDetail::OutputOnly);
    ys.push_back(out.y);
    if (!record) continue;
    records.push_back(std::move(out.record));
    for (size_t i = 0; i < state.memory.size(); ++i) {
      memories[i].push_back(state.memory[i]);
      momenta[i].push_back(state.momentum[i]);
    }
    if (state.latent.defined()) latents.push_back(state.latent);
  }
  ForwardOutput result;
  result.y = at::stack(ys, 1);
  if (!record) return result;
  auto stack = [&](auto field) {
    std::vector<at::Tensor> parts;
    for (const auto& r : records) parts.push_back(field(r));
    return at::stack(parts, 1);
  };
  ForwardTrace trace;
  trace.inputs.phi_k = stack([](const StepRecord& r) { return r.phi_k; });
  trace.inputs.phi_q = stack([](const StepRecord& r) { return r.phi_q; });
  trace.inputs.v = stack([](const StepRecord& r) { return r.v; });
  trace.inputs.retain = stack([](const StepRecord& r) { return r.retain; });
  trace.inputs.lr = stack([](const StepRecord& r) { return r.lr; });
  trace.inputs.momentum = stack([](const StepRecord& r) { return r.momentum; });
  trace.inputs.delta = stack([](const StepRecord& r) { return r.delta; });
  trace.inputs.gamma = stack([](const StepRecord& r) { return r.token_gamma; });
  if (rule_.dgd_per_feature) {
    trace.inputs.retain_feature = stack([](const StepRecord& r) { return r.retain_feature; });
    trace.inputs.lr_feature = stack([](const StepRecord& r) { return r.lr_feature; });
  }
  trace.gamma = stack([](const StepRecord& r) { return r.gamma; });
  trace.loss_before = stack([](const StepRecord& r) { return r.loss_before; });
  trace.loss_after = stack([](const StepRecord& r) { return r.loss_after; });
  for (size_t i = 0; i < memories.size(); ++i) {
    trace.memory.push_back(at::stack(memories[i], 1));
    trace.momentum.push_back(at::stack(momenta[i], 1));
  }
  if (!latents.empty()) trace.latent = at::stack(latents, 1);
  result.trace = std::move(trace);
  return result;
}

}  // namespace memscope::model
