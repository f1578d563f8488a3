// Matrix probes of SPEC §8: effective rank and Newton–Schulz orthogonality error.
// Batched over leading dimensions; computed on the tensor's device.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// erank(M) = exp(−Σ p_i log p_i), p_i = σ_i / Σ_j σ_j (Roy & Vetterli 2007), over the last two
// dimensions. 1 ≤ erank ≤ rank; an all-zero matrix has erank 0 (it spans no direction).
at::Tensor effective_rank(const at::Tensor& m);

// The same from singular values σ [..., r] (descending), when the caller already has them.
at::Tensor effective_rank_from_singular_values(const at::Tensor& sigma);

struct OrthogonalityError {
  at::Tensor error;      // ‖UᵀU − I‖_F / √r, r = min(rows, cols) (U Uᵀ when U is wide)
  at::Tensor sigma_min;  // smallest of U's r singular values
  at::Tensor sigma_max;  // largest
};

// How far U (typically NS_k(S_t)) is from having orthonormal rows or columns (SPEC §8).
OrthogonalityError orthogonality_error(const at::Tensor& u);

// The same from U's singular values σ [..., r] (descending): UᵀU = VΣ²Vᵀ, so
// ‖UᵀU − I‖_F = √Σ(σ_i² − 1)², for tall and wide U alike. One SVD serves erank and NS error.
OrthogonalityError orthogonality_error_from_singular_values(const at::Tensor& sigma);

}  // namespace memscope::model
