// One MLP memory's pass and its backward for a few inputs, written as loops over its float32
// row-major weights (SPEC §3: M(z) = z + LN(W_1 GELU(W_2 z)), mlp_memory.h's ATen form): the fused
// per-token steps' (fused_mlp_step.cpp, fused_cms_step.cpp), where a token's few hundred ATen calls
// cost far more than its arithmetic.
//
// The products read each weight row once for all the inputs: dot products for h = W_2 z and
// o = W_1 a, axpys for δh. The file is built with reassociation (model/CMakeLists.txt), so the dot
// products vectorise too, and without the vectoriser's run-time overlap checks: a loop that stores
// through one pointer and reads through another is vectorised only where __restrict says they do
// not overlap. A checked loop falls back to its scalar copy where they might, and the two copies
// round differently, so a step's result depended on where malloc had put the scratch.
#pragma once
#include <cstdint>

namespace memscope::model {

// One memory (or head): d inputs, `hidden` units, LN's affine parameters [d].
struct MlpHead {
  int64_t d, hidden;
  const float* ln_weight;
  const float* ln_bias;
};

// `rows` inputs z [rows,d] through the pass: h, a [rows,hidden]; n (LN before its affine), y [rows,d];
// σ [rows]. w1 = W_1 [d,hidden], w2 = W_2 [hidden,d]. No output may overlap an input.
void mlp_forward(const MlpHead& head, const float* z, int64_t rows, const float* w1, const float* w2,
                 float* h, float* a, float* n, float* stdev, float* y);

// One input's δo = ∂ℓ/∂o [d] and δh = ∂ℓ/∂h [hidden] from ψ = ∂ℓ/∂y [d], back through the pass
// (h, n, σ: that input's) and W_1 [d,hidden]:
//   δn = γ_LN·ψ,  δo = (δn − mean δn − n·mean(δn·n))/σ,  δh = (W_1ᵀ δo)·GELU'(h).
// Its gradients are rank 1: ∇W_1 = δo ⊗ a, ∇W_2 = δh ⊗ z.
void mlp_deltas(const MlpHead& head, const float* psi, const float* h, const float* n, float stdev,
                const float* w1, float* delta_o, float* delta_h);

// inner_clip.h's κ = min(1, clip/‖g‖) for one input's rank-1 gradient (δo ⊗ a, δh ⊗ z), without
// building it: ‖g‖² = ‖δo‖²‖a‖² + ‖δh‖²‖z‖². 1 where clip ≤ 0 (off).
float mlp_clip_factor(const MlpHead& head, const float* delta_o, const float* a, const float* delta_h,
                      const float* z, double clip);

// out [rows] = W [rows,cols] x [cols], W row-major.
void matvec(const float* w, const float* x, int64_t rows, int64_t cols, float* out);

}  // namespace memscope::model
