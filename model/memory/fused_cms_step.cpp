// One token of one CMS level without autograd, on the CPU in float32: the debugger's step
// (continuum_memory.h's level_stretch for a stretch of one token). The ATen form is some 230 calls a
// level and token, 0.17 ms of dispatch at demo-mqar-hope's width for about 0.2 MFLOP; here the same
// equations run as loops (mlp_head_kernels.h):
//   k = W_k z,  v = W_v z,  η = max_lr·σ(w·z + b)
//   y = M_W(z);  the pass at k, ψ = (M_W(k) − v)/D,  δo, δh (mlp_deltas)
//   κ = min(1, clip/‖g‖) with ‖g‖² = ‖δo‖²‖a‖² + ‖δh‖²‖k‖² (the gradient is rank 1)
//   G ← G + κη·(δo ⊗ a, δh ⊗ k), and at the period's end W ← W − G, G ← 0
// A period that began with G = 0 and ends at this token writes W − κη·g directly, as level_stretch
// does. Every tensor the state held is left as it was: the new W and G are new tensors, since
// the engine keeps earlier states (and a nested level's W is its slower neighbour's).
// The result equals the ATen form's to float32 rounding (tests/model/test_continuum_memory.cpp).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "model/memory/continuum_memory.h"
#include "model/memory/mlp_head_kernels.h"
#include "model/util/cpu_kernels.h"
#include "model/util/simd_clones.h"

namespace memscope::model {

namespace {

// out = base + sign·(u ⊗ x) over a [rows,cols] block: the rank-1 step into W or G.
MEMSCOPE_SIMD_CLONES
void add_outer(const float* __restrict base, const float* __restrict u, const float* __restrict x, float sign,
               int64_t rows, int64_t cols, float* __restrict out) {
  for (int64_t i = 0; i < rows; ++i) {
    const float e = sign * u[i];
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = base[i * cols + j] + e * x[j];
  }
}

MEMSCOPE_SIMD_CLONES
void subtract(const float* __restrict a, const float* __restrict b, int64_t n, float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] - b[i];
}

}  // namespace

bool ContinuumMemoryImpl::fused_level_step_applies(int64_t level, const at::Tensor& z,
                                                   const CmsLevelState& s) const {
  if (at::GradMode::is_enabled() || z.dim() != 3 || z.size(1) != 1 || !cpu_kernel_float(z)) return false;
  const auto l = static_cast<size_t>(level);
  for (const at::Tensor* t : {&w_k[l], &w_v[l], &ln_weight[l], &ln_bias[l], &lr_w[l], &lr_b[l]})
    if (!cpu_kernel_float(*t)) return false;
  if (s.weights.size() != 2 || s.accumulated.size() != 2) return false;
  for (size_t i = 0; i < 2; ++i)
    if (!cpu_kernel_float(s.weights[i]) || !cpu_kernel_float(s.accumulated[i]) || s.weights[i].dim() != 4 ||
        s.weights[i].size(0) != z.size(0) || s.weights[i].size(1) != 1 ||
        s.accumulated[i].sizes() != s.weights[i].sizes())
      return false;
  return true;
}

at::Tensor ContinuumMemoryImpl::fused_level_step(int64_t level, const at::Tensor& z_in, CmsLevelState& s,
                                                 bool update) const {
  const auto l = static_cast<size_t>(level);
  const int64_t B = z_in.size(0), D = options_.d_model, hidden = 4 * D, size = D * hidden;
  const at::Tensor z_all = z_in.contiguous();
  const at::Tensor wk = w_k[l].contiguous(), wv = w_v[l].contiguous(), lrw = lr_w[l].contiguous();
  const at::Tensor ln_w = ln_weight[l].contiguous(), ln_b = ln_bias[l].contiguous();
  const float lr_bias = lr_b[l].item<float>();
  const MlpHead head{D, hidden, ln_w.data_ptr<float>(), ln_b.data_ptr<float>()};
  const std::vector<at::Tensor> w_old{s.weights[0].contiguous(), s.weights[1].contiguous()};
  const std::vector<at::Tensor> g_old{s.accumulated[0].contiguous(), s.accumulated[1].contiguous()};
  // A period that began with G = 0 and ends here writes W directly; otherwise G takes the step
  // and, at the period's end, W takes G.
  const bool direct = update && s.accumulated_zero;
  const std::vector<at::Tensor> w_new =
      update ? std::vector<at::Tensor>{at::empty_like(w_old[0]), at::empty_like(w_old[1])} : w_old;
  const std::vector<at::Tensor> g_new =
      direct ? g_old : std::vector<at::Tensor>{at::empty_like(g_old[0]), at::empty_like(g_old[1])};

  at::Tensor y = at::empty({B, 1, D}, z_all.options());
  // Scratch for the pass over the two inputs [z; k].
  std::vector<float> rows(2 * D), h(2 * hidden), a(2 * hidden), n(2 * D), stdev(2), out(2 * D), v(D), psi(D),
      delta_o(D), delta_h(hidden);
  for (int64_t b = 0; b < B; ++b) {
    const float* z = z_all.data_ptr<float>() + b * D;
    std::copy_n(z, D, rows.data());
    float* k = rows.data() + D;
    matvec(wk.data_ptr<float>(), z, D, D, k);
    matvec(wv.data_ptr<float>(), z, D, D, v.data());
    float logit = lr_bias;
    const float* lr_weight = lrw.data_ptr<float>();
    for (int64_t i = 0; i < D; ++i) logit += lr_weight[i] * z[i];
    const float eta = static_cast<float>(options_.max_lr) / (1.0f + std::exp(-logit));

    const float* w1 = w_old[0].data_ptr<float>() + b * size;
    const float* w2 = w_old[1].data_ptr<float>() + b * size;
    mlp_forward(head, rows.data(), 2, w1, w2, h.data(), a.data(), n.data(), stdev.data(), out.data());
    std::copy_n(out.data(), D, y.data_ptr<float>() + b * D);
    for (int64_t i = 0; i < D; ++i) psi[i] = (out[D + i] - v[i]) / static_cast<float>(D);
    const float* a_k = a.data() + hidden;
    mlp_deltas(head, psi.data(), h.data() + hidden, n.data() + D, stdev[1], w1, delta_o.data(),
               delta_h.data());
    const float weight =
        mlp_clip_factor(head, delta_o.data(), a_k, delta_h.data(), k, options_.inner_clip) * eta;
    // The two rank-1 gradients, as (left factor, right factor, rows, cols): δo ⊗ a_k, δh ⊗ k.
    const float* left[2] = {delta_o.data(), delta_h.data()};
    const float* right[2] = {a_k, k};
    const int64_t shape[2][2] = {{D, hidden}, {hidden, D}};
    for (int i = 0; i < 2; ++i) {
      const auto at = static_cast<size_t>(i);
      const int64_t offset = b * size;
      const float* w = w_old[at].data_ptr<float>() + offset;
      if (direct) {  // W ← W − κη·g
        add_outer(w, left[i], right[i], -weight, shape[i][0], shape[i][1],
                  w_new[at].data_ptr<float>() + offset);
        continue;
      }
      float* g_out = g_new[at].data_ptr<float>() + offset;
      add_outer(g_old[at].data_ptr<float>() + offset, left[i], right[i], weight, shape[i][0], shape[i][1],
                g_out);                                                            // G ← G + κη·g
      if (update) subtract(w, g_out, size, w_new[at].data_ptr<float>() + offset);  // W ← W − G
    }
  }
  s.weights = w_new;
  if (direct) return y;  // G stays zero (level_stretch's direct write)
  if (update) {
    for (auto& g : s.accumulated) g = at::zeros_like(g);
  } else {
    s.accumulated = g_new;
  }
  s.accumulated_zero = update;
  return y;
}

}  // namespace memscope::model
