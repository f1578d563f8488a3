// causal_depthwise_conv: on the CPU in float32, an autograd function over three loops (forward,
// input gradient, tap gradient), each one pass over a contiguous [B,T,C] with C innermost, so
// that it vectorises; elsewhere, and for a backward that must itself be differentiable, K shifted
// multiply-adds in ATen. The two are held equal in tests/model/test_causal_conv.cpp, forward to the
// bit: this file is built without contracting a multiply and an add into one FMA
// (model/CMakeLists.txt), as ATen's separate mul and add never are.
#include "model/memory/causal_conv.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "model/util/cpu_kernels.h"

namespace memscope::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Σ_k padded[:, k : k + T]·taps[:, k], in k's order.
at::Tensor shifted_sum(const at::Tensor& padded, const at::Tensor& taps) {
  const int64_t K = taps.size(1), T = padded.size(1) - K + 1;
  at::Tensor out = padded.narrow(1, 0, T) * taps.select(1, 0);
  for (int64_t k = 1; k < K; ++k) out = out + padded.narrow(1, k, T) * taps.select(1, k);
  return out;
}

struct Sizes {
  int64_t B, T, C, K;
};
Sizes sizes_of(const at::Tensor& padded, const at::Tensor& taps) {
  const int64_t K = taps.size(1);
  return {padded.size(0), padded.size(1) - K + 1, padded.size(2), K};
}

// out[b,t,:] = Σ_k x[b,t+k,:]·w_k, with the taps transposed to [K,C] so each is a row.
at::Tensor forward_loop(const at::Tensor& x, const at::Tensor& taps_by_k, const Sizes& s) {
  at::Tensor out = at::empty({s.B, s.T, s.C}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = taps_by_k.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, s.B * s.T, 64, [&](int64_t begin, int64_t end) {
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / s.T, t = bt % s.T;
      float* __restrict o = op + bt * s.C;
      const float* x0 = xp + (b * (s.T + s.K - 1) + t) * s.C;
      for (int64_t c = 0; c < s.C; ++c) o[c] = x0[c] * wp[c];
      for (int64_t k = 1; k < s.K; ++k) {
        const float* __restrict xk = x0 + k * s.C;
        const float* __restrict wk = wp + k * s.C;
        for (int64_t c = 0; c < s.C; ++c) o[c] += xk[c] * wk[c];
      }
    }
  });
  return out;
}

// d_x[b,u,:] = Σ_k g[b,u−k,:]·w_k over the k with 0 ≤ u − k < T.
at::Tensor input_gradient_loop(const at::Tensor& g, const at::Tensor& taps_by_k, const Sizes& s) {
  const int64_t padded_len = s.T + s.K - 1;
  at::Tensor d_x = at::empty({s.B, padded_len, s.C}, g.options());
  const float* gp = g.data_ptr<float>();
  const float* wp = taps_by_k.data_ptr<float>();
  float* dp = d_x.data_ptr<float>();
  at::parallel_for(0, s.B * padded_len, 64, [&](int64_t begin, int64_t end) {
    for (int64_t bu = begin; bu < end; ++bu) {
      const int64_t b = bu / padded_len, u = bu % padded_len;
      float* __restrict d = dp + bu * s.C;
      for (int64_t c = 0; c < s.C; ++c) d[c] = 0.0f;
      for (int64_t k = 0; k < s.K; ++k) {
        const int64_t t = u - k;
        if (t < 0 || t >= s.T) continue;
        const float* __restrict gt = gp + (b * s.T + t) * s.C;
        const float* __restrict wk = wp + k * s.C;
        for (int64_t c = 0; c < s.C; ++c) d[c] += gt[c] * wk[c];
      }
    }
  });
  return d_x;
}

// d_w[c,k] = Σ_{b,t} g[b,t,c]·x[b,t+k,c]: a [K,C] partial per block of kRowsPerPart rows, in
// parallel, then the partials added in block order, so that the bits do not depend on the thread
// count (a training run gives the same weights on any machine's core count).
at::Tensor tap_gradient_loop(const at::Tensor& g, const at::Tensor& x, const Sizes& s) {
  constexpr int64_t kRowsPerPart = 256;
  const int64_t rows = s.B * s.T, parts = std::max<int64_t>(1, (rows + kRowsPerPart - 1) / kRowsPerPart);
  std::vector<float> partial(static_cast<size_t>(parts * s.K * s.C), 0.0f);
  const float* gp = g.data_ptr<float>();
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part)
      for (int64_t bt = part * kRowsPerPart; bt < std::min(rows, (part + 1) * kRowsPerPart); ++bt) {
        const int64_t b = bt / s.T, t = bt % s.T;
        const float* __restrict gt = gp + bt * s.C;
        const float* x0 = xp + (b * (s.T + s.K - 1) + t) * s.C;
        for (int64_t k = 0; k < s.K; ++k) {
          float* __restrict acc = partial.data() + (part * s.K + k) * s.C;
          const float* __restrict xk = x0 + k * s.C;
          for (int64_t c = 0; c < s.C; ++c) acc[c] += gt[c] * xk[c];
        }
      }
  });
  at::Tensor d_w = at::empty({s.C, s.K}, g.options());  // [C,K]: element (c, k) at c·K + k
  float* dp = d_w.data_ptr<float>();
  for (int64_t k = 0; k < s.K; ++k)
    for (int64_t c = 0; c < s.C; ++c) {
      float sum = 0.0f;
      for (int64_t part = 0; part < parts; ++part)
        sum += partial[static_cast<size_t>((part * s.K + k) * s.C + c)];
      dp[c * s.K + k] = sum;
    }
  return d_w;
}

struct CausalConvFunction : public torch::autograd::Function<CausalConvFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& padded, const at::Tensor& taps) {
    // The inputs themselves, so that a differentiable backward's graph reaches them.
    ctx->save_for_backward({padded, taps});
    return forward_loop(padded.contiguous(), taps.t().contiguous(), sizes_of(padded, taps));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &padded = saved[0], &taps = saved[1];
    const Sizes s = sizes_of(padded, taps);
    if (at::GradMode::is_enabled()) {
      // A backward to be differentiated again: the same sums in ATen, recorded.
      const at::Tensor g = grads[0];
      std::vector<at::Tensor> d_taps, d_x_terms;
      for (int64_t k = 0; k < s.K; ++k) {
        d_taps.push_back((g * padded.narrow(1, k, s.T)).sum(at::IntArrayRef{0, 1}));
        d_x_terms.push_back(at::constant_pad_nd(g * taps.select(1, k), {0, 0, k, s.K - 1 - k}));
      }
      at::Tensor d_x = d_x_terms[0];
      for (int64_t k = 1; k < s.K; ++k) d_x = d_x + d_x_terms[k];
      return {d_x, at::stack(d_taps, 1)};
    }
    const at::Tensor g = grads[0].contiguous();
    at::Tensor d_x, d_w;
    if (ctx->needs_input_grad(0)) d_x = input_gradient_loop(g, taps.t().contiguous(), s);
    if (ctx->needs_input_grad(1)) d_w = tap_gradient_loop(g, padded.contiguous(), s);
    return {d_x, d_w};
  }
};

}  // namespace

at::Tensor causal_depthwise_conv(const at::Tensor& padded, const at::Tensor& taps) {
  TORCH_CHECK(padded.dim() == 3 && taps.dim() == 2 && taps.size(0) == padded.size(2),
              "causal_depthwise_conv: padded [B,T+K-1,C] and taps [C,K], got ", padded.sizes(), " and ",
              taps.sizes());
  TORCH_CHECK(taps.size(1) >= 1, "causal_depthwise_conv: taps [C,K] need K >= 1, got ", taps.sizes());
  TORCH_CHECK(padded.size(1) >= taps.size(1) - 1, "causal_depthwise_conv: ", padded.size(1),
              " padded tokens for ", taps.size(1), " taps");
  const bool loops = padded.scalar_type() == at::kFloat && taps.scalar_type() == at::kFloat &&
                     cpu_kernels_on(padded.device()) && taps.device() == padded.device();
  return loops ? CausalConvFunction::apply(padded, taps) : shifted_sum(padded, taps);
}

}  // namespace memscope::model
