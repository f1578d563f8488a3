// The chunkwise form of HOPE's self-modifying memories (self_modifying_memory.h, SPEC §7 and §9).
//
// Inside a chunk every write reads the chunk-start memories W_s, so all of a chunk's reads are one
// batched pass over the five memories (stacked on the head axis), and every inner gradient is
// analytic and rank 1 per token (mlp_inner_gradient): ∇W_1 = δo ⊗ a, ∇W_2 = δh ⊗ k. The dgd
// writes W_j = W_{j−1}·p_j − η_j·∇_j (p_j = α_j − η_j k_j², scaling W_1's rows and W_2's columns)
// then unroll to
//
//   W_j = W_s·P_j − Σ_{i≤j} η_i·D[j,i]·∇_i,   D[j,i] = Π_{i<l≤j} p_l,   P_j = Π_{l≤j} p_l,
//
// so the chunk-end memories are one matmul each, and the main memory's reads after each write,
// y_j = M_j(q_j), need only W_s and b×b inner products (the dual form), never M_j itself. A call
// that continues a chunk an earlier call began (the debugger steps one token a call) unrolls the
// same way from the current memories in place of W_s, its gradients still at the chunk start. Against
// the sequential step, which builds a new [B,5,d,4d] state and a double-backward graph per token,
// this materialises one state per chunk and differentiates plain tensor ops.
#include <ATen/ATen.h>

#include "model/memory/causal_conv.h"
#include "model/memory/decayed_write.h"
#include "model/memory/inner_clip.h"
#include "model/memory/linear_scan.h"
#include "model/memory/mlp_memory.h"
#include "model/memory/self_modifying_memory.h"
#include "model/memory/small_matmul.h"
#include "model/memory/weight_views.h"
#include "model/util/autocast.h"

namespace memscope::model {

namespace {

constexpr int64_t kMain = static_cast<int64_t>(SelfModMemory::Main);
constexpr int64_t kProjections = 4;  // M_k, M_v, M_η, M_α: read at x_t and, for their targets, at v_t

at::Tensor unit(const at::Tensor& z) { return z / z.norm(2, -1, true).clamp_min(1e-12); }

}  // namespace

at::Tensor SelfModifyingMemoryImpl::forward(const at::Tensor& input, SelfModState& state,
                                            int64_t chunk) const {
  TORCH_CHECK(input.dim() == 3, "self-modifying memory: expected x of shape [B,T,d], got ", input.sizes());
  TORCH_CHECK(chunk >= 1, "self-modifying memory: chunk size must be at least 1, got ", chunk);
  // train.bf16_autocast: every product here reads or writes a memory, so all of it is the
  // recurrence, in the state's float32 (as MemoryLayerImpl::forward keeps its own).
  const AutocastOff state_precision(input.device().type());
  const at::Tensor x = state_precision.was_on() ? input.to(state.weights[0][0].scalar_type()) : input;
  std::vector<at::Tensor> ys;
  // Chunks sit at multiples of b from the stream start, so a call that starts inside one first
  // finishes it, reading the chunk start the state carries (the anchor).
  for (int64_t t = 0; t < x.size(1);) {
    const int64_t n = std::min(x.size(1) - t, chunk - state.tokens % chunk);
    ys.push_back(forward_chunk(x.narrow(1, t, n), state, chunk));
    t += n;
  }
  if (ys.empty()) return x.new_empty({x.size(0), 0, x.size(2)});
  return ys.size() == 1 ? ys.front() : at::cat(ys, 1);
}

at::Tensor SelfModifyingMemoryImpl::forward_chunk(const at::Tensor& x, SelfModState& state, int64_t chunk) const {
  const int64_t n = x.size(1), d = options_.d_model;
  TORCH_CHECK(x.size(2) == d, "self-modifying memory: expected x of shape [B,T,", d, "], got ", x.sizes());
  TORCH_INTERNAL_ASSERT(n >= 1 && state.tokens % chunk + n <= chunk,
                        "forward_chunk: the tokens must lie in one chunk");
  // A call that continues a chunk (as step() decides it): its writes read the chunk-start memories,
  // and land on the current ones, which hold the chunk's earlier writes.
  const bool continuing = state.continues_chunk(chunk);
  // The five memories on the head axis: W_1 [B,5,d,4d], W_2 [B,5,4d,d], LN [5,d]. The previous
  // chunk left them stacked; stacking again copies 2·B·5·d·4d floats (and their gradient).
  const std::array<at::Tensor, 2> base = stack_memories(state.weights, state.stacked);
  const std::array<at::Tensor, 2> chunk_start =
      continuing ? stack_memories(state.anchor, state.anchor_stacked) : base;
  const ChunkEnd end = fused_token_applies(x, base, chunk_start)
                           ? fused_token(x, state, base, chunk_start)
                           : chunk_aten(x, state, base, chunk_start, continuing);
  for (int m = 0; m < kSelfModCount; ++m) state.weights[m] = {end.w1.narrow(1, m, 1), end.w2.narrow(1, m, 1)};
  state.stacked = {end.w1, end.w2};
  state.tokens += n;
  if (state.tokens % chunk != 0) {
    // A call that ends inside the chunk: the next call finishes it at these reads.
    if (!continuing) {
      // The chunk start as slices of the stack its writes read, so that the chunk's later calls
      // find it stacked (a fresh stack, at the first chunk or after step(), included).
      for (int m = 0; m < kSelfModCount; ++m)
        state.anchor[m] = {base[0].narrow(1, m, 1), base[1].narrow(1, m, 1)};
      state.anchor_stacked = base;
    }
    state.anchor_chunk = chunk;
  } else {
    state.anchor = {};
    state.anchor_stacked = {};
    state.anchor_chunk = 0;
  }
  state.last_error = end.error.detach();
  state.last_retain = end.retain.detach();
  state.last_lr = end.lr.detach();
  state.last_precond = end.precond.detach();
  return end.y;
}

SelfModifyingMemoryImpl::ChunkEnd SelfModifyingMemoryImpl::chunk_aten(
    const at::Tensor& x, SelfModState& state, const std::array<at::Tensor, 2>& base,
    const std::array<at::Tensor, 2>& chunk_start, bool continuing) const {
  const int64_t B = x.size(0), n = x.size(1), d = options_.d_model;
  std::vector<at::Tensor> ln_w, ln_b;
  for (int m = 0; m < kSelfModCount; ++m) {
    ln_w.push_back(ln_weight[m].to(x.dtype()));
    ln_b.push_back(ln_bias[m].to(x.dtype()));
  }
  // Each use of a stacked weight through its own view, so that training sums their gradients in one
  // pass (weight_views.h). The targets' pass at v is a stop-gradient and shares the projections'.
  // The first three uses read the chunk start; the main read after the writes and the write itself
  // start from the current memories (the same stack, except in a continued chunk).
  enum Use { Projections, AtKey, InnerGradient, MainRead, Write, UseCount };
  const std::vector<WeightRange> uses{{0, kProjections}, {}, {}, {kMain, 1}, {}};  // one per Use, in order
  TORCH_INTERNAL_ASSERT(uses.size() == UseCount);
  auto views = [&](size_t i) {
    if (!continuing) return weight_views(base[i], 1, uses);
    std::vector<at::Tensor> out = weight_views(chunk_start[i], 1, {uses.begin(), uses.begin() + MainRead});
    for (const at::Tensor& v : weight_views(base[i], 1, {uses.begin() + MainRead, uses.end()}))
      out.push_back(v);
    return out;
  };
  const std::vector<at::Tensor> w1 = views(0), w2 = views(1);
  const at::Tensor gain = at::cat(ln_w, 0), shift = at::cat(ln_b, 0);
  auto projections = [&](const at::Tensor& z) {
    return mlp_pass(z, w1[Projections], w2[Projections], gain.narrow(0, 0, kProjections),
                    shift.narrow(0, 0, kProjections));
  };
  auto per_memory = [&](const at::Tensor& z, int64_t count) { return z.unsqueeze(1).expand({B, count, n, d}); };

  // k, v, η, α at the chunk-start projections; q static (SPEC §7).
  const at::Tensor projected = projections(per_memory(x, kProjections)).y;  // [B,4,n,d]
  at::Tensor q_in = at::matmul(x, w_q.t()), k_in = projected.select(1, 0), v_in = projected.select(1, 1);
  if (options_.conv) {
    const at::Tensor window = at::cat({state.conv.to(x.dtype()), at::cat({q_in, k_in, v_in}, -1)}, 1);  // [B,3+n,3d]
    const at::Tensor mixed = causal_depthwise_conv(window, conv_weight);  // [B,n,3d]
    state.conv = window.slice(1, n, n + 3);
    const auto qkv = mixed.chunk(3, -1);
    q_in = qkv[0];
    k_in = qkv[1];
    v_in = qkv[2];
  }
  const at::Tensor k = unit(k_in), v = v_in, q = unit(q_in);
  const at::Tensor eta = options_.max_lr * gate(projected.select(1, 2) + b_lr);
  const at::Tensor alpha = gate(projected.select(1, 3) + b_retain);

  // Targets v̂_□ = sg(M_□(v_t)), and v_t for the main memory; every memory writes at key k_t.
  at::Tensor projected_targets;
  {
    const at::NoGradGuard stop_gradient;
    projected_targets = projections(per_memory(v, kProjections)).y;
  }
  const at::Tensor targets = at::cat({projected_targets, v.unsqueeze(1)}, 1);
  const at::Tensor key = per_memory(k, kSelfModCount);
  const MlpPass at_key = mlp_pass(key, w1[AtKey], w2[AtKey], gain, shift);

  // seed 004 change 1's auxiliary retrieval loss, at the chunk-start main memory: M(k_t) is the
  // main memory's read at its key, already in the pass above.
  const at::Tensor retrieved = at_key.y.select(1, kMain);
  state.aux = state.aux + ((retrieved - v.detach()).pow(2).mean(-1) + (retrieved.detach() - v).pow(2).mean(-1)).sum(1);
  const MlpInnerGradient inner = mlp_inner_gradient(at_key, targets, w1[InnerGradient], gain);
  at::Tensor delta_o = inner.delta_o, delta_h = inner.delta_h;  // [B,5,n,d], [B,5,n,4d]
  if (options_.inner_clip > 0) {
    // ‖δo ⊗ a‖² + ‖δh ⊗ k‖² = ‖δo‖²‖a‖² + ‖δh‖²‖k‖², per memory and token.
    const at::Tensor norm_sq =
        delta_o.pow(2).sum(-1) * at_key.a.pow(2).sum(-1) + delta_h.pow(2).sum(-1) * key.pow(2).sum(-1);
    const at::Tensor factor = clip_factor(norm_sq, options_.inner_clip).unsqueeze(-1);
    delta_o = delta_o * factor;
    delta_h = delta_h * factor;
  }

  // The dgd recurrence unrolled (header comment), per memory: the projection memories write with
  // self_lr_scale·η_t. Decays D [B,5,n,n,d], P_j [B,5,n,d].
  const at::Tensor rate = at::cat({(options_.self_lr_scale * eta).unsqueeze(1).expand({B, kProjections, n, d}),
                                   eta.unsqueeze(1)},
                                  1);  // [B,5,n,d], no host tensor per chunk
  const at::Tensor p = alpha.unsqueeze(1) - rate * k.pow(2).unsqueeze(1);
  const DecayProducts per_feature = decay_products(p.transpose(-1, -2));  // over [B,5,d,n] (linear_scan.h)
  const at::Tensor D = per_feature.within.permute({0, 1, 3, 4, 2});      // [B,5,n(j),n(i),d]
  const at::Tensor P = per_feature.from_start.transpose(-1, -2);         // [B,5,n,d]
  const at::Tensor to_end = rate * D.select(2, n - 1);  // η_i ⊙ D[n−1,i]: [B,5,n,d]
  const at::Tensor P_end = P.select(2, n - 1);          // [B,5,d]
  // W_end = W_s ⊙ P_end − Σ_i η_i D[n−1,i] ∇_i: the sum's sign goes on its small factor, so that the
  // write is one decayed_write and its backward hands the sum its gradient uncopied.
  const at::Tensor minus_to_end = -to_end;
  const at::Tensor w1_end = decayed_write(w1[Write], P_end.unsqueeze(-1),
                                          small_matmul((minus_to_end * delta_o).transpose(-1, -2), at_key.a));
  const at::Tensor w2_end = decayed_write(
      w2[Write], P_end.unsqueeze(-2), small_matmul(delta_h.transpose(-1, -2), minus_to_end * k.unsqueeze(1)));

  // y_j = M_j(q_j) after write j, from W_s and the chunk's rank-1 writes:
  //   W_2,j q_j = W_2,s (P_j ⊙ q_j) − Σ_{i≤j} δh_i ⟨η_i ⊙ D[j,i] ⊙ k_i, q_j⟩
  //   W_1,j a_j = P_j ⊙ (W_1,s a_j) − Σ_{i≤j} ⟨a_i, a_j⟩ η_i ⊙ D[j,i] ⊙ δo_i
  const at::Tensor main_dh = delta_h.select(1, kMain), main_do = delta_o.select(1, kMain), main_a = at_key.a.select(1, kMain);
  const at::Tensor main_D = D.select(1, kMain), main_P = P.select(1, kMain);
  const at::Tensor key_query = ((eta * k).unsqueeze(1) * main_D * q.unsqueeze(2)).sum(-1);  // [B,n(j),n(i)], 0 for i > j
  MlpPass read;
  read.h =
      small_matmul(main_P * q, w2[MainRead].squeeze(1).transpose(-1, -2)) - small_matmul(key_query, main_dh);
  read.a = exact_gelu(read.h);
  const at::Tensor gram = small_matmul(read.a, main_a.transpose(-1, -2));  // ⟨a_i, a_j⟩ [B,n(j),n(i)]
  read.o = main_P * small_matmul(read.a, w1[MainRead].squeeze(1).transpose(-1, -2)) -
           (gram.unsqueeze(-1) * main_D * (eta * main_do).unsqueeze(1)).sum(2);
  finish_mlp_pass(read, q, gain.narrow(0, kMain, 1), shift.narrow(0, kMain, 1));

  // The last token's probes; the memory's own preconditioner.
  return {read.y,
          w1_end,
          w2_end,
          inner.loss.select(2, n - 1),
          alpha.select(1, n - 1),
          eta.select(1, n - 1),
          p.select(1, kMain).select(1, n - 1)};
}

}  // namespace memscope::model
