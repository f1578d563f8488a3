// The chunkwise-parallel form (SPEC §9; Titans §3.2, Atlas Eq. 15/39-41). Inside a chunk of b
// tokens every gradient is taken at the memory from the end of the previous chunk, so all b
// gradients are one batched computation; momentum and retention are then linear recurrences,
// solved in closed form with b×b decay matrices (linear_scan.h); NS runs batched over the chunk.
#include <torch/csrc/autograd/autograd.h>

#include "model/memory/attentional_bias.h"
#include "model/memory/decayed_contractions.h"
#include "model/memory/decayed_write.h"
#include "model/memory/dgd_preconditioner.h"
#include "model/memory/fused_linear_chunkwise.h"
#include "model/memory/fused_mlp_chunkwise.h"
#include "model/memory/inner_clip.h"
#include "model/memory/linear_chunk_scan.h"
#include "model/memory/linear_dual_form.h"
#include "model/memory/linear_scan.h"
#include "model/memory/memory_layer.h"
#include "model/memory/mlp_memory.h"
#include "model/memory/newton_schulz.h"
#include "model/memory/retention.h"
#include "model/memory/small_matmul.h"
#include "model/memory/weight_views.h"
#include "model/util/autocast.h"
#include "model/util/cpu_kernels.h"

namespace memscope::model {

namespace {

at::Tensor per_token_scale(const at::Tensor& gate) { return gate.unsqueeze(-1).unsqueeze(-1); }  // [B,H,n,1,1]

// Σ_s D[t,s] X_s for a stack X [B,H,n,a,b] of matrices.
at::Tensor mix(const at::Tensor& d, const at::Tensor& x) {
  return at::matmul(d, x.flatten(-2)).view(x.sizes());
}

struct ChunkResult {
  at::Tensor y;                      // [B,H,n,d_v]
  at::Tensor weights;                // [B,H,n,c]
  at::Tensor loss_before, loss_after;  // [B,H,n] (record only)
  std::vector<at::Tensor> memory, momentum;  // [B,H,n,…] (record only)
  at::Tensor latent;
};

class ChunkRunner {
 public:
  ChunkRunner(const MemoryLayerImpl& layer, MemoryState& state, bool record)
      : layer_(layer), rule_(layer.rule()), state_(state), record_(record) {}

  // One chunk of n tokens, all [B,H,n,…]; `gradient_point` is the chunk-start memory.
  // alpha and eta are [B,H,n] per head, or [B,H,n,d_φ] per feature (dgd.per_feature).
  ChunkResult run(const at::Tensor& phi, const at::Tensor& q, const at::Tensor& v, const at::Tensor& alpha,
                  const at::Tensor& eta, const at::Tensor& beta, const at::Tensor& gamma, const at::Tensor& delta,
                  const std::vector<at::Tensor>& gradient_point) {
    const int64_t c = rule_.window, n = phi.size(2);
    ext_phi_ = at::cat({state_.ring_phi, phi}, 2);
    ext_v_ = at::cat({state_.ring_v, v}, 2);
    ext_gamma_ = at::cat({state_.ring_gamma, gamma}, 2);
    win_phi_ = token_windows(ext_phi_, c);
    win_v_ = token_windows(ext_v_, c);
    weights_ = token_windows(ext_gamma_, c) * layer_.position_weights(phi.options());
    loss_weights_ = weights_ * inner_loss_scale(rule_, layer_.head_dim());  // γ·(1/d_v when normalised)
    win_delta_ = delta.unsqueeze(-1);

    ChunkResult out;
    const bool fast = !record_ && rule_.structure == Structure::Linear && rule_.optimiser != Optimiser::Muon &&
                      !rule_.dgd_per_feature &&
                      (rule_.retention == Retention::L2Decay || rule_.retention == Retention::None);
    const bool mlp_fast = !record_ && rule_.structure == Structure::Mlp && rule_.optimiser != Optimiser::Muon &&
                          (rule_.retention == Retention::L2Decay || rule_.retention == Retention::None);
    if (fast) {
      linear_psi(gradient_point[0]);  // the dual form needs ψ only, never the per-token g_t
      out.y = dual_form(q, alpha, eta, beta);
    } else if (mlp_fast && rule_.optimiser == Optimiser::Dgd) {
      out.y = mlp_dgd_dual_form(gradient_point, q, alpha, eta);
    } else if (mlp_fast && fused_mlp_dual_form_applies(q)) {
      out.y = fused_mlp_dual_form(gradient_point, q, alpha, eta, beta);
    } else if (mlp_fast) {
      out.y = mlp_dual_form(gradient_point, q, alpha, eta, beta);
    } else {
      out = materialised(gradients(gradient_point), q, alpha, eta, beta);
    }
    out.weights = weights_;
    state_.ring_phi = ext_phi_.slice(2, n);
    state_.ring_v = ext_v_.slice(2, n);
    state_.ring_gamma = ext_gamma_.slice(2, n);
    return out;
  }

 private:
  bool linear() const { return rule_.structure == Structure::Linear; }

  // k̄² of the MLP dgd preconditioner for each chunk token's window (SPEC §5), [B,H,n,d_φ].
  at::Tensor key_squares() const { return window_key_squares(win_phi_, weights_); }

  // Outputs of the memory `mem` (one matrix stack per weight, [B,H,n,…] or [B,H,…]) on the windows.
  at::Tensor window_read(const std::vector<at::Tensor>& mem, bool per_token) const {
    auto w = [&](const at::Tensor& m) { return per_token ? m : m.unsqueeze(2); };
    return linear() ? at::matmul(win_phi_, w(mem[0]).transpose(-1, -2)) : layer_.mlp_read(win_phi_, w(mem[0]), w(mem[1]));
  }

  at::Tensor window_loss(const std::vector<at::Tensor>& per_token_mem) const {
    return (loss_weights_ * bias_loss(window_read(per_token_mem, true), win_v_, rule_, win_delta_)).sum(-1);
  }

  // ψ_{t,j} = γ_{t,j} ∂ℓ/∂y at the chunk-start M for every window slot: [B,H,n,c,d_v].
  void linear_psi(const at::Tensor& m) {
    psi_ = linear_window_psi(rule_, m, win_phi_, win_v_, loss_weights_, win_delta_);
  }

  // g_t for every chunk token at the chunk-start memory: [B,H,n,…] per weight.
  std::vector<at::Tensor> gradients(const std::vector<at::Tensor>& gp) {
    if (linear()) {
      linear_psi(gp[0]);
      return {at::matmul(psi_.transpose(-1, -2), win_phi_)};
    }
    // MLP: per-token gradients via one autograd call to the activations (∂ℓ/∂h, ∂ℓ/∂o), then
    // outer products; create_graph when training so the outer loss sees through the update.
    const bool differentiable = at::GradMode::is_enabled() &&
                                (gp[0].requires_grad() || gp[1].requires_grad() || win_phi_.requires_grad() ||
                                 loss_weights_.requires_grad());
    at::AutoGradMode grad_on(true);
    at::Tensor w1 = differentiable ? gp[0] : gp[0].detach().requires_grad_(true);
    at::Tensor w2 = differentiable ? gp[1] : gp[1].detach().requires_grad_(true);
    at::Tensor z = differentiable ? win_phi_ : win_phi_.detach();
    MlpPass pass = mlp_pass(z, w1.unsqueeze(2), w2.unsqueeze(2), layer_.ln_weight.to(z.dtype()),
                            layer_.ln_bias.to(z.dtype()));
    at::Tensor psi = bias_grad(pass.y, win_v_, rule_, win_delta_) * loss_weights_.unsqueeze(-1);
    if (!differentiable) psi = psi.detach();
    auto d = torch::autograd::grad({pass.y}, {pass.h, pass.o}, {psi}, /*retain_graph=*/differentiable,
                                   /*create_graph=*/differentiable);
    at::Tensor g1 = small_matmul(d[1].transpose(-1, -2), pass.a);  // Σ_j δo aᵀ: [B,H,n,d,4d]
    at::Tensor g2 = small_matmul(d[0].transpose(-1, -2), z);       // Σ_j δh φᵀ: [B,H,n,4d,d]
    if (rule_.inner_clip > 0.0) {
      const at::Tensor factor = clip_factor({g1, g2}, rule_.inner_clip);
      g1 = g1 * factor;
      g2 = g2 * factor;
    }
    if (!differentiable) return {g1.detach(), g2.detach()};
    return {g1, g2};
  }

  // Every per-token state materialised: needed for NS (nonlinear in S_t), for the nonlinear
  // retentions' projection, and for traces.
  ChunkResult materialised(const std::vector<at::Tensor>& grads, const at::Tensor& q, const at::Tensor& alpha,
                           const at::Tensor& eta, const at::Tensor& beta) {
    const int64_t n = q.size(2);
    ChunkResult out;
    // dgd on MLP memory keeps a diagonal preconditioner p_t = α_t − η_t ⊙ k_sq_t (dgd_preconditioner.h),
    // so like per-feature dgd each feature follows its own recurrence, in p_t instead of α_t.
    const bool mlp_dgd = !linear() && rule_.optimiser == Optimiser::Dgd;
    const bool per_feature = rule_.dgd_per_feature || mlp_dgd;
    at::Tensor keep = alpha, lr = eta;  // [B,H,n] per head, or [B,H,n,d_φ] per feature
    if (mlp_dgd) {
      const at::Tensor k_sq = key_squares();
      keep = rule_.dgd_per_feature ? alpha : alpha.unsqueeze(-1).expand_as(k_sq);
      lr = rule_.dgd_per_feature ? eta : eta.unsqueeze(-1).expand_as(k_sq);
      keep = keep - lr * k_sq;
    }
    // Per feature, column j of M follows its own recurrence in α_t[j]: products over [B,H,d_φ,n].
    const DecayProducts retain = decay_products(per_feature ? keep.transpose(-1, -2) : keep);
    std::vector<at::Tensor> before = state_.memory;
    std::vector<at::Tensor> mem_all, s_all;
    for (size_t i = 0; i < grads.size(); ++i) {
      // W1 [d,4d] of an MLP has its features on the rows: its recurrence runs on the transpose.
      const bool rows = mlp_dgd && i == 0;
      auto oriented = [&](const at::Tensor& t) { return rows ? t.transpose(-1, -2) : t; };
      const at::Tensor g = oriented(grads[i]);
      const at::Tensor s0 = oriented(state_.momentum[i]).unsqueeze(2);
      at::Tensor momentum, update;
      if (rule_.optimiser == Optimiser::Dgd) {
        momentum = s0.expand_as(g);
        update = per_feature ? g * lr.unsqueeze(-2) : per_token_scale(lr) * g;  // g_t diag(η_t)
      } else {
        // S_t = β_t S_{t−1} + u_t with u = η g (gd-momentum) or g (muon), SPEC §5.
        const DecayProducts decay = decay_products(beta);
        at::Tensor u = rule_.optimiser == Optimiser::GdMomentum ? per_token_scale(eta) * g : g;
        momentum = per_token_scale(decay.from_start) * s0 + mix(decay.within, u);
        // Without autograd, small float32 matrices on the CPU take newton_schulz_small's loop (the
        // sequential step's too, so both forms measure the same Newton–Schulz); otherwise ATen's.
        update = rule_.optimiser == Optimiser::GdMomentum
                     ? momentum
                     : per_token_scale(eta) * newton_schulz_small(momentum, rule_.ns);
      }
      // Z_t = α_t Z_{t−1} − U_t on the retention's latent Z (retention.h), then M_t = P(Z_t).
      at::Tensor z0;
      switch (rule_.retention) {
        case Retention::LqNormalize: z0 = state_.latent; break;
        case Retention::Softmax: z0 = softmax_latent(state_.memory[i]); break;
        default: z0 = oriented(state_.memory[i]);
      }
      at::Tensor latent;
      if (per_feature) {
        // Z_t[:, j] = P_t[j] Z_0[:, j] − Σ_s D_j[t,s] U_s[:, j]
        latent = retain.from_start.transpose(-1, -2).unsqueeze(-2) * z0.unsqueeze(2) -
                 at::einsum("bhjts,bhsij->bhtij", {retain.within, update});
      } else {
        latent = per_token_scale(retain.from_start) * z0.unsqueeze(2) - mix(retain.within, update);
      }
      at::Tensor memory;
      switch (rule_.retention) {
        case Retention::LqNormalize:
          memory = lq_normalize(latent, rule_.lq_q);
          state_.latent = latent.select(2, n - 1);
          if (record_) out.latent = latent;
          break;
        case Retention::Softmax: memory = softmax_rows(latent); break;
        default: memory = oriented(latent);
      }
      momentum = oriented(momentum);
      mem_all.push_back(memory);
      s_all.push_back(momentum);
      state_.memory[i] = memory.select(2, n - 1);
      state_.momentum[i] = momentum.select(2, n - 1);
    }
    std::vector<at::Tensor> read_from = mem_all;
    std::vector<at::Tensor> prev(mem_all.size());
    for (size_t i = 0; i < mem_all.size(); ++i)
      prev[i] = at::cat({before[i].unsqueeze(2), mem_all[i].slice(2, 0, n - 1)}, 2);
    if (rule_.read == ReadOrder::BeforeWrite) read_from = prev;
    if (linear()) {
      out.y = small_matmul(read_from[0], q.unsqueeze(-1)).squeeze(-1);
    } else {
      out.y = layer_.mlp_read(q.unsqueeze(-2), read_from[0], read_from[1]).squeeze(-2);
    }
    if (record_) {
      out.loss_before = window_loss(prev);
      out.loss_after = window_loss(mem_all);
      out.memory = mem_all;
      out.momentum = s_all;
    }
    return out;
  }

  // Linear memory, gd-momentum or dgd, l2-decay or none: everything stays linear in M_0, S_0 and
  // the ψ_{r,j} φ_{r+j}ᵀ terms (linear_dual_form.h).
  //   S_t = P^β_t S_0 + Σ_r D^β[t,r] η_r g_r,   M_t = P^α_t M_0 − Σ_s D^α[t,s] S_s
  //       = P^α_t M_0 − (D^α P^β)_t S_0 − Σ_r (D^α D^β)[t,r] η_r g_r
  at::Tensor dual_form(const at::Tensor& q, const at::Tensor& alpha, const at::Tensor& eta, const at::Tensor& beta) {
    const DualCoefficients k = dual_coefficients(rule_, alpha, eta, beta);
    const at::Tensor psi = psi_.flatten(2, 3);      // [B,H,n·c,d_v]
    const at::Tensor phi = win_phi_.flatten(2, 3);  // [B,H,n·c,d_φ]
    const at::Tensor m0 = state_.memory[0], s0 = state_.momentum[0];
    // The end state first: the reads take S_0 through its view (DualEnd::momentum_start).
    const DualEnd end = dual_end_state(end_coefficients(rule_, k, eta), phi, psi, m0, s0);
    const at::Tensor y = dual_read(k, q, phi, psi, m0, end.momentum_start);
    state_.memory[0] = end.memory;
    if (end.momentum.defined()) state_.momentum[0] = end.momentum;
    return y;
  }

  // MLP memory, gd-momentum, l2-decay or none: the dual form of the residual MLP (SPEC §3). Every
  // window slot's gradient at the chunk-start W is rank 1 (∇W_1 = δo ⊗ a, ∇W_2 = δh ⊗ φ, from
  // mlp_backward), so W_t is W_0, S_0 and those terms with the linear form's coefficients, and the
  // read M_t(q_t) needs only inner products with them: W_2,t q_t first, then W_1,t GELU(·). No
  // per-token [d,4d] weight is ever built.
  // Every window slot's inner gradient at the chunk-start W, as rank-1 factors (mlp_backward):
  // ∇W_1 = δo ⊗ a and ∇W_2 = δh ⊗ φ per slot, clipped per token (SPEC §4). Rows [B,H,n·c,…].
  struct SlotGradients {
    at::Tensor phi, a, d_o, d_h;
  };
  // The chunk-start weights for each of their uses in an MLP dual form, each use through its own view
  // (weight_views.h), so that training sums a weight's gradients in one pass rather than autograd's
  // pairwise weight-sized adds (7% of the d256 MLP-memory training step). A call that continues a
  // chunk takes its gradients at the stored anchor instead, and keeps plain uses.
  struct ChunkStart {
    std::vector<at::Tensor> pass;       // the slots' pass (the gradient point)
    at::Tensor backward_w1;             // W_1 in their backward
    std::vector<at::Tensor> read, end;  // the memory in the dual read and in the chunk-end state
  };
  ChunkStart chunk_start(const std::vector<at::Tensor>& gradient_point) const {
    const std::vector<at::Tensor>& w = state_.memory;
    if (!gradient_point[0].is_same(w[0]) || !gradient_point[1].is_same(w[1]))
      return {gradient_point, gradient_point[0], w, w};
    // Along the rows, so that the gradient sum has B·H·rows rows to share among threads.
    const std::vector<at::Tensor> w1 = weight_views(w[0], -2, whole(4)),
                                  w2 = weight_views(w[1], -2, whole(3));
    return {{w1[0], w2[0]}, w1[1], {w1[2], w2[1]}, {w1[3], w2[2]}};
  }

  SlotGradients slot_gradients(const std::vector<at::Tensor>& gradient_point,
                               const at::Tensor& backward_w1) const {
    const int64_t n = win_phi_.size(2), c = rule_.window;
    const at::Tensor ln_w = layer_.ln_weight.to(win_phi_.dtype()), ln_b = layer_.ln_bias.to(win_phi_.dtype());
    SlotGradients g;
    g.phi = win_phi_.flatten(2, 3);  // every window slot a row
    // Every slot reads the same chunk-start W, so a key's pass is the same in each of the c windows
    // it is in: one pass over the n + c − 1 distinct keys, then windowed, rather than n·c passes.
    const MlpPass distinct = mlp_pass(ext_phi_, gradient_point[0], gradient_point[1], ln_w, ln_b);
    auto windowed = [&](const at::Tensor& t) { return token_windows(t, c).flatten(2, 3); };  // [B,H,n·c,…]
    MlpPass at_slots;  // the fields mlp_backward and the rank-1 factors read (not o)
    at_slots.h = windowed(distinct.h);
    at_slots.a = windowed(distinct.a);
    at_slots.n = windowed(distinct.n);
    at_slots.stdev = windowed(distinct.stdev);
    at_slots.y = windowed(distinct.y);
    auto slots = [&](const at::Tensor& t) { return t.unflatten(2, {n, c}); };  // [B,H,n·c,…] → [B,H,n,c,…]
    const at::Tensor psi = bias_grad(slots(at_slots.y), win_v_, rule_, win_delta_) * loss_weights_.unsqueeze(-1);
    const MlpBackward back = mlp_backward(at_slots, psi.flatten(2, 3), backward_w1, ln_w);
    g.a = at_slots.a;
    g.d_o = back.delta_o;
    g.d_h = back.delta_h;
    if (rule_.inner_clip > 0.0) {
      // ‖g_t‖² over the window's rank-1 terms: Σ_{j,k} (δo_j·δo_k)(a_j·a_k) + (δh_j·δh_k)(φ_j·φ_k).
      auto gram = [&](const at::Tensor& t) { return small_matmul(slots(t), slots(t).transpose(-1, -2)); };
      const at::Tensor norm_sq = (gram(g.d_o) * gram(g.a) + gram(g.d_h) * gram(g.phi)).sum({-2, -1});  // [B,H,n]
      const at::Tensor factor = repeat_each(clip_factor(norm_sq, rule_.inner_clip), c).unsqueeze(-1);
      g.d_o = g.d_o * factor;
      g.d_h = g.d_h * factor;
    }
    return g;
  }

  at::Tensor mlp_dual_form(const std::vector<at::Tensor>& gradient_point, const at::Tensor& q,
                           const at::Tensor& alpha, const at::Tensor& eta, const at::Tensor& beta) {
    const at::Tensor ln_w = layer_.ln_weight.to(q.dtype()), ln_b = layer_.ln_bias.to(q.dtype());
    const ChunkStart w0 = chunk_start(gradient_point);  // the recurrence starts here
    const SlotGradients g = slot_gradients(w0.pass, w0.backward_w1);
    const at::Tensor &phi = g.phi, &d_o = g.d_o, &d_h = g.d_h;
    const DualCoefficients k = dual_coefficients(rule_, alpha, eta, beta);
    // The chunk-end state first, W_n = P_n W_0 − s_n S_0 − Σ_r coef[n,r] g_r, and S_n likewise: the
    // reads take S_0 through its view (DualEnd::momentum_start).
    const EndCoefficients e = end_coefficients(rule_, k, eta);
    const std::vector<at::Tensor> deltas{d_o, d_h}, inputs{g.a, phi};
    std::vector<at::Tensor> s0(2);
    for (size_t i = 0; i < 2; ++i) {
      const DualEnd end = dual_end_state(e, inputs[i], deltas[i], w0.end[i], state_.momentum[i]);
      s0[i] = end.momentum_start;
      state_.memory[i] = end.memory;
      if (end.momentum.defined()) state_.momentum[i] = end.momentum;
    }
    MlpPass y;
    y.h = dual_read(k, q, phi, d_h, w0.read[1], s0[1]);
    y.a = exact_gelu(y.h);
    y.o = dual_read(k, y.a, g.a, d_o, w0.read[0], s0[0]);
    finish_mlp_pass(y, q, ln_w, ln_b);
    return y.y;
  }

  // The same dual form as one loop per head (fused_mlp_chunkwise.h), for inference on the CPU in
  // float32 with the l2 bias; set_fused_step(false) keeps the ATen form above, its reference.
  bool fused_mlp_dual_form_applies(const at::Tensor& q) const {
    return layer_.fused_step_on() && rule_.bias == Bias::L2 && cpu_kernels_on(q.device()) &&
           q.scalar_type() == at::kFloat && !at::GradMode::is_enabled();
  }
  at::Tensor fused_mlp_dual_form(const std::vector<at::Tensor>& gradient_point, const at::Tensor& q,
                                 const at::Tensor& alpha, const at::Tensor& eta, const at::Tensor& beta) {
    MlpChunkInputs in;
    in.keys = ext_phi_;
    in.values = ext_v_;
    in.slot_weights = loss_weights_;
    in.queries = q;
    in.alpha = alpha;
    in.eta = eta;
    in.beta = beta;
    in.gradient_point = gradient_point;
    in.memory = state_.memory;
    in.momentum = state_.momentum;
    in.ln_weight = layer_.ln_weight;
    in.ln_bias = layer_.ln_bias;
    in.inner_clip = rule_.inner_clip;
    in.read_after_write = rule_.read == ReadOrder::AfterWrite;
    MlpChunkOutputs out = fused_mlp_chunk(in);
    state_.memory = out.memory;
    state_.momentum = out.momentum;
    return out.y;
  }

  // MLP memory, dgd (SPEC §5's diagonal preconditioner, dgd_preconditioner.h): per feature f,
  // W_1's row f and W_2's column f follow W_t = p_t[f]·W_{t−1} − η_t[f]·g_t with
  // p = α − η⊙k̄², so with D[t,r,f] = Π_{r<l≤t} p_l[f] and P_t = Π_{l≤t} p_l:
  //   W_2,t q = W_2,0 (P_t ⊙ q) − Σ_{r,j} δh_{r,j} ⟨φ_{r,j} ⊙ η_r ⊙ D[t,r], q⟩
  //   W_1,t a = P_t ⊙ (W_1,0 a) − Σ_{r,j} ⟨a_{r,j}, a⟩ η_r ⊙ D[t,r] ⊙ δo_{r,j}
  // (j the window slots). dgd keeps no momentum.
  at::Tensor mlp_dgd_dual_form(const std::vector<at::Tensor>& gradient_point, const at::Tensor& q,
                               const at::Tensor& alpha, const at::Tensor& eta) {
    const int64_t n = q.size(2), c = rule_.window;
    const at::Tensor ln_w = layer_.ln_weight.to(q.dtype()), ln_b = layer_.ln_bias.to(q.dtype());
    const ChunkStart w0 = chunk_start(gradient_point);
    const SlotGradients g = slot_gradients(w0.pass, w0.backward_w1);
    const at::Tensor k_sq = key_squares();  // [B,H,n,d_φ]
    const at::Tensor lr = rule_.dgd_per_feature ? eta : eta.unsqueeze(-1).expand_as(k_sq);
    const at::Tensor keep = (rule_.dgd_per_feature ? alpha : alpha.unsqueeze(-1).expand_as(k_sq)) - lr * k_sq;
    const bool before_write = rule_.read == ReadOrder::BeforeWrite;  // y_t = M_{t−1} q_t: the products of row t−1
    auto slots = [&](const at::Tensor& t) { return t.unflatten(2, {n, c}); };  // [B,H,n,c,…]
    // Inference takes the two contractions over D as loops (decayed_contractions.h) and never
    // builds D; autograd, and set_fused_step(false), the ATen form.
    const bool loops = layer_.fused_step_on() && decayed_contractions_apply(q);
    at::Tensor P, P_end, D_end, D;  // P_t, P_n and D[n,r]: [B,H,n,d_φ]; D [B,H,n(t),n(r),d_φ]
    if (loops) {
      P = at::cumprod(keep, 2);
      const at::Tensor from = at::cumprod(keep.flip(2), 2).flip(2);  // [r] = Π_{l≥r} p_l
      D_end = at::cat({from.slice(2, 1, n), at::ones_like(from.slice(2, 0, 1))}, 2);
    } else {
      const DecayProducts per_feature = decay_products(keep.transpose(-1, -2));  // over [B,H,d_φ,n]
      D = per_feature.within.permute({0, 1, 3, 4, 2});
      P = per_feature.from_start.transpose(-1, -2);
      D_end = D.select(2, n - 1);
      if (before_write) D = at::cat({at::zeros_like(D.slice(2, 0, 1)), D.slice(2, 0, n - 1)}, 2);
    }
    P_end = P.select(2, n - 1);
    if (before_write) P = at::cat({at::ones_like(P.slice(2, 0, 1)), P.slice(2, 0, n - 1)}, 2);
    MlpPass y;
    // ⟨φ_{r,j} ⊙ η_r ⊙ D[t,r], q_t⟩ → [B,H,n(t),n·c]
    const at::Tensor key_query =
        loops ? decayed_key_query(keep, q, lr, slots(g.phi), before_write)
              : at::einsum("bhtrf,bhrjf->bhtrj", {D * q.unsqueeze(3), slots(g.phi) * lr.unsqueeze(3)}).flatten(3, 4);
    y.h = small_matmul(P * q, w0.read[1].transpose(-1, -2)) - small_matmul(key_query, g.d_h);
    y.a = exact_gelu(y.h);
    const at::Tensor gram = small_matmul(y.a, g.a.transpose(-1, -2));  // ⟨a_t, a_{r,j}⟩: [B,H,n,n·c]
    // Σ_r D[t,r] ⊙ η_r ⊙ Σ_j ⟨a_t, a_{r,j}⟩ δo_{r,j} → [B,H,n,d_φ]
    const at::Tensor mixed =
        loops ? decayed_mixed_read(keep, lr, gram, slots(g.d_o), before_write)
              : (D * lr.unsqueeze(2) * at::einsum("bhtrj,bhrjf->bhtrf", {gram.unflatten(3, {n, c}), slots(g.d_o)})).sum(3);
    y.o = P * small_matmul(y.a, w0.read[0].transpose(-1, -2)) - mixed;
    finish_mlp_pass(y, q, ln_w, ln_b);

    const at::Tensor to_end = (lr * D_end).unsqueeze(3);  // η_r ⊙ D[n,r]: [B,H,n,1,d_φ]
    // W_n = W_0 ⊙ P_n − Σ_r η_r D[n,r] g_r: the sum's sign on its small factor, one decayed_write each.
    const at::Tensor minus_to_end = -to_end;
    state_.memory[0] =
        decayed_write(w0.end[0], P_end.unsqueeze(-1),
                      small_matmul((slots(g.d_o) * minus_to_end).flatten(2, 3).transpose(-1, -2), g.a));
    state_.memory[1] =
        decayed_write(w0.end[1], P_end.unsqueeze(-2),
                      small_matmul(g.d_h.transpose(-1, -2), (slots(g.phi) * minus_to_end).flatten(2, 3)));
    return y.y;
  }

  const MemoryLayerImpl& layer_;
  const MemoryRule& rule_;
  MemoryState& state_;
  bool record_;
  at::Tensor ext_phi_, ext_v_, ext_gamma_, win_phi_, win_v_, weights_, loss_weights_, win_delta_, psi_;
};

// Whether the call can take fused_linear_chunkwise: the linear memory with the l2 bias at c = 1,
// gd-momentum or dgd (one gate per head), a linear retention, on the CPU, from a chunk boundary.
bool fused_chunkwise_applies(const MemoryRule& r, const at::Tensor& x, const MemoryState& state, int64_t chunk) {
  return x.size(1) > 0 && r.structure == Structure::Linear && r.bias == Bias::L2 && r.window == 1 &&
         (r.optimiser == Optimiser::GdMomentum || (r.optimiser == Optimiser::Dgd && !r.dgd_per_feature)) &&
         (r.retention == Retention::L2Decay || r.retention == Retention::None) && state.memory.size() == 1 &&
         !state.latent.defined() && state.tokens % chunk == 0 && cpu_kernels_on(x.device()) &&
         (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble);
}

// The projected tokens in `dtype`: under train.bf16_autocast project()'s products come out in
// bfloat16, and the recurrence takes them in the state's dtype.
void cast_to(ProjectedTokens& p, at::ScalarType dtype) {
  for (at::Tensor* t : {&p.phi_k, &p.phi_q, &p.v, &p.retain, &p.lr, &p.momentum, &p.gamma, &p.delta,
                        &p.retain_feature, &p.lr_feature})
    if (t->defined() && t->scalar_type() != dtype) *t = t->to(dtype);
}

}  // namespace

ForwardOutput MemoryLayerImpl::forward(const at::Tensor& x, MemoryState& state, int64_t chunk, bool record) const {
  TORCH_CHECK(chunk >= 1, "memory forward: chunk size must be at least 1, got ", chunk);
  // Muon runs one Newton–Schulz per token in either form (NS is nonlinear in S_t, so a chunk cannot
  // share it); the batched form below adds only per-token S_t and M_t built through ATen around
  // it. In inference the fused step with the gradient point frozen at the chunk start, which is
  // step(x_t, state, b) (SPEC §9), is the same chunkwise model without them.
  if (!record && rule_.optimiser == Optimiser::Muon && x.size(1) > 0 && fused_step_applies(x.select(1, 0), state, chunk)) {
    std::vector<at::Tensor> ys;
    for (int64_t t = 0; t < x.size(1); ++t)
      ys.push_back(fused_step(x.select(1, t), state, StepDetail::OutputOnly, chunk).y);
    ForwardOutput result;
    result.y = at::stack(ys, 1);
    return result;
  }
  ProjectedTokens p = project(x, state);
  // train.bf16_autocast: the projections above are its matrix products. The recurrence below runs
  // in the state's float32, as chunk kernels keep their state (FLA's): autocast would cast both
  // inputs of each small product and round the writes, chunk after chunk.
  const AutocastOff state_precision(x.device().type());
  if (state_precision.was_on() && !state.memory.empty()) cast_to(p, state.memory.front().scalar_type());
  const int64_t T = x.size(1);
  auto heads_first = [](const at::Tensor& t) { return t.transpose(1, 2); };  // [B,T,H,…] → [B,H,T,…]
  const MemoryRule& r = rule_;
  // Titans' and DeltaNet's rules go through one function with a written-out backward
  // (fused_linear_chunkwise.cpp); set_fused_step(false) keeps the ATen form below, the reference.
  if (fused_step_on_ && !record && fused_chunkwise_applies(r, x, state, chunk)) {
    LinearChunkwiseInputs in;
    in.m0 = state.memory[0];
    in.s0 = state.momentum[0];
    in.phi = p.phi_k;  // token-major [B,T,H,…], as projected
    in.q = p.phi_q;
    in.v = p.v;
    // γ_t times the window's one position weight and the loss scale (SPEC §4 at c = 1).
    const double scale = inner_loss_scale(rule_, head_dim());
    in.weight = p.gamma * (position_weights(x.options()).select(0, 0) * scale);
    in.alpha = p.retain;
    in.eta = p.lr;
    in.beta = p.momentum;
    const LinearChunkwiseOutputs out = fused_linear_chunkwise(
        in, {chunk, r.inner_clip, r.optimiser == Optimiser::GdMomentum, r.read == ReadOrder::AfterWrite});
    state.memory[0] = out.m_end;
    if (r.optimiser == Optimiser::GdMomentum) state.momentum[0] = out.s_end;
    state.tokens += T;
    if (state.tokens % chunk != 0) {
      state.anchor = {out.anchor};
      state.anchor_chunk = chunk;
    } else {
      state.anchor.clear();
      state.anchor_chunk = 0;
    }
    ForwardOutput result;
    result.y = out.y;
    return result;
  }
  const at::Tensor phi = heads_first(p.phi_k), q = heads_first(p.phi_q), v = heads_first(p.v);
  // dgd.per_feature runs on the feature gates [B,H,T,d_φ]; everything else on one gate per head.
  const bool per_feature = rule_.dgd_per_feature;
  const at::Tensor alpha = heads_first(per_feature ? p.retain_feature : p.retain);
  const at::Tensor eta = heads_first(per_feature ? p.lr_feature : p.lr), beta = heads_first(p.momentum);
  const at::Tensor gamma = heads_first(p.gamma), delta = heads_first(p.delta);

  ChunkRunner runner(*this, state, record);
  std::vector<ChunkResult> results;
  // Whole chunks from a boundary, for the linear dual form: all at once (linear_chunk_scan.h).
  const bool scan = chunk_scan_.value_or(!cpu_kernels_on(x.device()));
  const int64_t scanned = scan ? linear_chunk_scan_tokens(r, state, T, chunk, record) : 0;
  if (scanned > 0) {
    results.emplace_back();
    results.back().y =
        linear_chunk_scan(*this, {phi, q, v, alpha, eta, beta, gamma, delta}, scanned, chunk, state);
  }
  // Chunks sit at multiples of b from the stream start; a chunk left open by the previous call
  // (same b) continues with its stored gradient point. The inputs are split into the chunks once:
  // a slice per chunk would cost its backward a zero-filled gradient of the whole sequence for
  // every chunk (autograd's slice backward), quadratic in the chunk count; split's is one cat.
  std::vector<int64_t> sizes;
  for (int64_t pos = scanned, tokens = state.tokens; pos < T;) {
    const int64_t n = std::min(chunk - tokens % chunk, T - pos);
    sizes.push_back(n);
    pos += n;
    tokens += n;
  }
  std::vector<std::vector<at::Tensor>> inputs;
  for (const at::Tensor* t : {&phi, &q, &v, &alpha, &eta, &beta, &gamma, &delta})
    inputs.push_back(sizes.empty() ? std::vector<at::Tensor>{}
                                   : t->slice(2, scanned, T).split_with_sizes(sizes, 2));
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t offset = state.tokens % chunk, n = sizes[i];
    const bool continuing = offset != 0 && state.anchor_chunk == chunk && !state.anchor.empty();
    const std::vector<at::Tensor> gradient_point = continuing ? state.anchor : state.memory;
    auto part = [&](size_t input) { return inputs[input][i]; };
    results.push_back(
        runner.run(part(0), part(1), part(2), part(3), part(4), part(5), part(6), part(7), gradient_point));
    state.tokens += n;
    if (state.tokens % chunk != 0) {
      state.anchor = gradient_point;
      state.anchor_chunk = chunk;
    } else {
      state.anchor.clear();
      state.anchor_chunk = 0;
    }
  }

  auto gather = [&](auto field) {
    std::vector<at::Tensor> parts;
    for (const auto& r : results) parts.push_back(field(r));
    return heads_first(at::cat(parts, 2));
  };
  ForwardOutput out;
  out.y = gather([](const ChunkResult& r) { return r.y; });
  if (!record) return out;
  ForwardTrace trace;
  trace.inputs = p;
  trace.gamma = gather([](const ChunkResult& r) { return r.weights; });
  trace.loss_before = gather([](const ChunkResult& r) { return r.loss_before; });
  trace.loss_after = gather([](const ChunkResult& r) { return r.loss_after; });
  for (size_t i = 0; i < state.memory.size(); ++i) {
    trace.memory.push_back(gather([i](const ChunkResult& r) { return r.memory[i]; }));
    trace.momentum.push_back(gather([i](const ChunkResult& r) { return r.momentum[i]; }));
  }
  if (state.latent.defined()) trace.latent = gather([](const ChunkResult& r) { return r.latent; });
  out.trace = std::move(trace);
  return out;
}

}  // namespace memscope::model
