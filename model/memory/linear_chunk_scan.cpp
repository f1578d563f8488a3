#include "model/memory/linear_chunk_scan.h"

#include <ATen/ATen.h>

#include "model/memory/attentional_bias.h"
#include "model/memory/linear_dual_form.h"
#include "model/memory/memory_layer.h"

namespace memscope::model {

int64_t linear_chunk_scan_tokens(const MemoryRule& rule, const MemoryState& state, int64_t T, int64_t chunk,
                                 bool record) {
  const bool covered = rule.structure == Structure::Linear && rule.optimiser != Optimiser::Muon &&
                       !rule.dgd_per_feature &&
                       (rule.retention == Retention::L2Decay || rule.retention == Retention::None);
  if (!covered || record || state.latent.defined() || state.memory.size() != 1 || state.tokens % chunk != 0)
    return 0;
  const int64_t chunks = T / chunk;
  return chunks >= 2 ? chunks * chunk : 0;
}

at::Tensor linear_chunk_scan(const MemoryLayerImpl& layer, const ChunkScanInputs& in, int64_t tokens,
                             int64_t chunk, MemoryState& state) {
  const MemoryRule& rule = layer.rule();
  const int64_t n = chunk, N = tokens / chunk, c = rule.window;
  auto lead = [&](const at::Tensor& t) { return t.slice(2, 0, tokens); };
  // [B,H,N·n,…] → [B,H,N,n,…], and with the chunks folded into the heads, [B,H·N,n,…].
  auto chunked = [&](const at::Tensor& t) {
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes[2] = n;
    sizes.insert(sizes.begin() + 2, N);
    return t.reshape(sizes);
  };
  auto folded = [&](const at::Tensor& t) { return chunked(t).flatten(1, 2); };
  // And back: [B,H·N,…] → [B,H,N,…].
  auto unfolded = [&](const at::Tensor& t) { return t.unflatten(1, {t.size(1) / N, N}); };

  // Everything that does not depend on a chunk's start state, for all chunks at once. The windows
  // run over the ring's c − 1 tokens and then the new ones, as chunk after chunk would.
  const at::Tensor ext_phi = at::cat({state.ring_phi, lead(in.phi)}, 2);
  const at::Tensor ext_v = at::cat({state.ring_v, lead(in.v)}, 2);
  const at::Tensor ext_gamma = at::cat({state.ring_gamma, lead(in.gamma)}, 2);
  const at::Tensor win_phi = chunked(token_windows(ext_phi, c));  // [B,H,N,n,c,d_φ]
  const at::Tensor win_v = chunked(token_windows(ext_v, c));
  const at::Tensor weights = token_windows(ext_gamma, c) * layer.position_weights(in.phi.options());
  const at::Tensor loss_weights = chunked(weights * inner_loss_scale(rule, layer.head_dim()));  // [B,H,N,n,c]
  const at::Tensor win_delta = chunked(lead(in.delta)).unsqueeze(-1);                           // [B,H,N,n,1]
  const at::Tensor phi_gram =
      rule.inner_clip > 0.0 ? at::matmul(win_phi, win_phi.transpose(-1, -2)) : at::Tensor();
  const at::Tensor eta = folded(lead(in.eta));
  const DualCoefficients k = dual_coefficients(rule, folded(lead(in.alpha)), eta, folded(lead(in.beta)));
  const EndCoefficients all_ends = end_coefficients(rule, k, eta);
  const at::Tensor phi_rows = win_phi.flatten(3, 4);  // [B,H,N,n·c,d_φ]

  // The recurrence, chunk by chunk: ψ at the chunk-start memory, then the chunk-end state. The
  // inputs are split by unbind, whose backward is one stack, not by select, whose backward writes
  // each chunk's gradient into a zero tensor the size of all N.
  auto per_chunk = [&](const at::Tensor& t, int64_t dim) {
    return t.defined() ? t.unbind(dim) : std::vector<at::Tensor>(static_cast<size_t>(N));
  };
  const auto phi_at = per_chunk(win_phi, 2), v_at = per_chunk(win_v, 2), lw_at = per_chunk(loss_weights, 2);
  const auto delta_at = per_chunk(win_delta, 2), gram_at = per_chunk(phi_gram, 2),
             rows_at = per_chunk(phi_rows, 2);
  const auto last_at = per_chunk(unfolded(all_ends.last), 2),
             start_at = per_chunk(unfolded(all_ends.last_start), 2);
  const bool momentum = k.has_momentum;
  const auto mom_at = per_chunk(momentum ? unfolded(all_ends.last_momentum) : at::Tensor(), 2);
  const auto sw_at = per_chunk(momentum ? unfolded(all_ends.s_weights) : at::Tensor(), 2);
  const auto beta_at = per_chunk(momentum ? unfolded(all_ends.beta_last) : at::Tensor(), 2);
  at::Tensor m = state.memory[0], s = state.momentum[0];
  std::vector<at::Tensor> m_starts, s_starts, psis;
  for (int64_t i = 0; i < N; ++i) {
    const size_t j = static_cast<size_t>(i);
    m_starts.push_back(m);
    const at::Tensor psi = linear_window_psi(rule, m, phi_at[j], v_at[j], lw_at[j], delta_at[j], gram_at[j])
                               .flatten(2, 3);  // [B,H,n·c,d_v]
    EndCoefficients e;
    e.has_momentum = momentum;
    e.last = last_at[j];
    e.last_start = start_at[j];
    e.last_momentum = mom_at[j];
    e.s_weights = sw_at[j];
    e.beta_last = beta_at[j];
    const DualEnd end = dual_end_state(e, rows_at[j], psi, m, s);
    if (momentum) s_starts.push_back(end.momentum_start);  // S_0 as the reads take it
    m = end.memory;
    if (end.momentum.defined()) s = end.momentum;
    psis.push_back(psi);
  }

  // The reads of every chunk at once, from the stacked chunk-start states.
  const at::Tensor m0 = at::stack(m_starts, 2).flatten(1, 2);  // [B,H·N,d_v,d_φ]
  const at::Tensor s0 = momentum ? at::stack(s_starts, 2).flatten(1, 2) : at::Tensor();
  const at::Tensor psi = at::stack(psis, 2).flatten(1, 2);  // [B,H·N,n·c,d_v]
  const at::Tensor y =
      dual_read(k, folded(lead(in.q)), phi_rows.flatten(1, 2), psi, m0, s0);  // [B,H·N,n,d_v]

  state.memory[0] = m;
  if (momentum) state.momentum[0] = s;
  state.ring_phi = ext_phi.slice(2, tokens);
  state.ring_v = ext_v.slice(2, tokens);
  state.ring_gamma = ext_gamma.slice(2, tokens);
  state.tokens += tokens;
  state.anchor.clear();
  state.anchor_chunk = 0;
  return unfolded(y).flatten(2, 3);  // [B,H,N·n,d_v]
}

}  // namespace memscope::model
