// The dual form of the linear memory's chunk (SPEC §9; the DeltaNet/TTT "dual form"): with every
// gradient of a chunk taken at its start memory M_0, momentum and retention are linear recurrences,
// so M_t = P^α_t M_0 − s_t S_0 − Σ_r coef[t,r] g_r, and reads and the end state need only n×n
// coefficient matrices and the window gradients' rank-one factors ψ_{r,j} φ_{r,j}ᵀ, never a
// per-token d_v×d_φ matrix. Shared by the per-chunk loop (chunkwise_forward.cpp) and the scan over
// many chunks (linear_chunk_scan.cpp). Shapes: [B,H,n,…] per chunk, any batch of chunks folded
// into H.
#pragma once
#include <ATen/core/Tensor.h>

#include "model/memory/linear_scan.h"
#include "model/memory/memory_rule.h"

namespace memscope::model {

// `row`, `start` and `momentum` are coef, P^α and s for the row each token reads (its own for
// read-after-write, the one before for read-before-write); coef = D^α D^β η, or D^α η without
// momentum, one column per window slot [B,H,n,n·c].
struct DualCoefficients {
  at::Tensor coef, start, row, momentum;
  at::Tensor s;  // s_t of every token's own row [B,H,n] (momentum is s shifted for read-before-write);
                 // s and momentum only with gd-momentum
  DecayProducts retain, beta;
  bool has_momentum = false;
};
// Each element of the last dimension c times in a row ([a, b] → [a, a, b, b] for c = 2), as
// repeat_interleave(c, -1) but without its device-to-host read of the output size (a stall on a
// GPU), and nothing at c = 1.
at::Tensor repeat_each(const at::Tensor& t, int64_t c);

// The window of each token, oldest first: [B,H,m+c−1,…] → [B,H,m,c,…].
at::Tensor token_windows(const at::Tensor& ext, int64_t c);

// alpha, eta, beta: the gates [B,H,n] (one per head).
DualCoefficients dual_coefficients(const MemoryRule& rule, const at::Tensor& alpha, const at::Tensor& eta,
                                   const at::Tensor& beta);

// What the chunk-end state takes of the coefficients, those of its last token:
//   M_n = last_start·M_0 − last_momentum·S_0 − Σ_r last[r] ψ_r φ_rᵀ
//   S_n = beta_last·S_0 + Σ_r s_weights[r] ψ_r φ_rᵀ                      (gd-momentum only)
struct EndCoefficients {
  at::Tensor last, s_weights;                       // [B,H,n·c,1]
  at::Tensor last_start, last_momentum, beta_last;  // [B,H]
  bool has_momentum = false;
};
EndCoefficients end_coefficients(const MemoryRule& rule, const DualCoefficients& k, const at::Tensor& eta);

// ψ_{t,j} = γ_{t,j} ∂ℓ/∂y at the memory m for every window slot, clipped per token (SPEC §4):
// [B,H,n,c,d_v]. win_phi [B,H,n,c,d_φ], win_v [B,H,n,c,d_v], loss_weights [B,H,n,c], win_delta
// [B,H,n,1]. phi_gram, the windows' φ_j·φ_k [B,H,n,c,c], only with the clip: given when already
// computed, else made here.
at::Tensor linear_window_psi(const MemoryRule& rule, const at::Tensor& m, const at::Tensor& win_phi,
                             const at::Tensor& win_v, const at::Tensor& loss_weights,
                             const at::Tensor& win_delta, const at::Tensor& phi_gram = {});

// The reads y_t = M_t q_t (or M_{t−1} q_t) [B,H,n,d_v]; psi and phi flattened over the window
// slots [B,H,n·c,…]; m0, s0 the chunk-start memory and momentum [B,H,d_v,d_φ].
at::Tensor dual_read(const DualCoefficients& k, const at::Tensor& q, const at::Tensor& phi,
                     const at::Tensor& psi, const at::Tensor& m0, const at::Tensor& s0);

// The chunk-end memory and momentum (momentum undefined without gd-momentum), and S_0 as the
// chunk's reads should take it: a view whose gradient the end state's backward sums with its own
// (state_update.h's momentum_end_update), or s0 itself.
struct DualEnd {
  at::Tensor memory, momentum, momentum_start;
};
DualEnd dual_end_state(const EndCoefficients& e, const at::Tensor& phi, const at::Tensor& psi,
                       const at::Tensor& m0, const at::Tensor& s0);

}  // namespace memscope::model
