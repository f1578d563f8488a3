// fused_mlp_chunkwise.h: the MLP dual form of SPEC §9 for gd with momentum, per head.
//
// Inside a chunk every gradient is taken at the chunk-start weights W̄, so token t's gradient is a
// sum over its window's slots j of rank-1 terms at key e = t + j (SPEC §3-§4):
//   ∇W_1 = Σ_j w_{t,j} δo_e ⊗ a_e,   ∇W_2 = Σ_j w_{t,j} δh_e ⊗ φ_e,
// where δo_e, δh_e are the backward of key e's pass at W̄ with ∂ℓ/∂y = y_e − v_e (the l2 bias; the
// backward is linear in it, so a slot's weight w_{t,j} and token t's clip factor f_t factor out).
// The ATen form works on the n·c slots; here each key's pass and backward runs once, and the slots
// fold into per-key coefficients. With the recurrences S_t = β_t S_{t−1} + η_t g_t and
// W_t = α_t W_{t−1} − S_t (SPEC §5, solved as in chunkwise_forward.cpp's dual_coefficients):
//   W_t = P_t W_0 − s_t S_0 − Σ_r K[t,r] η_r g_r,   K[t,r] = Σ_s D^α[t,s] D^β[s,r],
// and the read M_t(q_t) needs W_t only through products with q_t and GELU(W_2,t q_t):
//   W_2,t q = P_t W_2,0 q − s_t S_2,0 q − Σ_e E[t,e] (φ_e·q) δh_e,
//   W_1,t a = P_t W_1,0 a − s_t S_1,0 a − Σ_e E[t,e] (a_e·a) δo_e,
//   E[t,e] = Σ_j K[t,e−j] η_{e−j} w_{e−j,j} f_{e−j}      (token e − j's slot j reads key e).
// The chunk-end state is the same sums with the last row. Every product is one small_gemm.h call
// on a head's matrices, with the activations kept feature-major ([features, keys]), so that each
// product reads its right-hand operand by rows. The ATen form (set_fused_step(false)) is the
// reference: tests/model/test_fused_mlp_chunkwise.cpp checks the two equal, and against the
// sequential steps.
#include "model/memory/fused_mlp_chunkwise.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/memory/gelu_math.h"
#include "model/memory/small_gemm.h"

namespace memscope::model {

namespace {

constexpr float kLayerNormEps = 1e-5f;  // SPEC §3, as mlp_memory.cpp

// `#pragma GCC ivdep` marks the loops that store into one buffer while reading others, which never
// overlap: this file is built without the vectoriser's run-time overlap checks (model/CMakeLists.txt),
// so an unmarked one would stay scalar.

using Buffer = std::vector<float>;

// A thread's scratch for one head of a chunk: buffers handed out in the order run_head asks for
// them, grown to the largest asked for and kept, so that no chunk allocates or zeroes its ~0.7 MB
// of activations (at d = 64, b = 64). Nothing taken from it is zero.
class Scratch {
 public:
  float* take(int64_t size) {
    if (next_ == buffers_.size()) buffers_.emplace_back();
    Buffer& b = buffers_[next_++];
    if (static_cast<int64_t>(b.size()) < size) b.resize(static_cast<size_t>(size));
    return b.data();
  }
  void restart() { next_ = 0; }

 private:
  std::vector<Buffer> buffers_;
  size_t next_ = 0;
};

// out [cols, rows] = in [rows, cols]ᵀ.
void transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

// LN over the features of each column of o [d, count] (feature-major): o becomes n = (o − mean)/σ
// in place and stdev[k] = σ of column k.
void normalise_columns(float* o, int64_t d, int64_t count, float* mean, float* stdev) {
  std::fill_n(mean, count, 0.0f);
  std::fill_n(stdev, count, 0.0f);
  for (int64_t i = 0; i < d; ++i)
#pragma GCC ivdep
    for (int64_t k = 0; k < count; ++k) mean[k] += o[i * count + k];
  for (int64_t k = 0; k < count; ++k) mean[k] /= static_cast<float>(d);
  for (int64_t i = 0; i < d; ++i)
#pragma GCC ivdep
    for (int64_t k = 0; k < count; ++k) {
      const float centred = o[i * count + k] - mean[k];
      stdev[k] += centred * centred;
    }
  for (int64_t k = 0; k < count; ++k) stdev[k] = std::sqrt(stdev[k] / static_cast<float>(d) + kLayerNormEps);
  for (int64_t i = 0; i < d; ++i)
#pragma GCC ivdep
    for (int64_t k = 0; k < count; ++k) o[i * count + k] = (o[i * count + k] - mean[k]) / stdev[k];
}

// The per-head pieces of one chunk: sizes, the recurrences' coefficients and the keys' gradients.
struct ChunkHead {
  int64_t n, c, m, d, hidden;
  bool read_after;
  // Recurrence coefficients, SPEC §9: P^α_t, s_t, P^β_t, K[t,r]·η_r (row-major n×n) and D^β[n−1,r].
  Buffer p_alpha, s, p_beta, coef, d_beta_last;
};

// P^α, s, P^β and coef[t,r] = K[t,r]·η_r by their recurrences: D^β[t,r] = β_t D^β[t−1,r],
// K[t,r] = α_t K[t−1,r] + D^β[t,r], s_t = α_t s_{t−1} + P^β_t (the products in cumprod's order).
void recurrences(ChunkHead& h, const float* alpha, const float* eta, const float* beta) {
  const int64_t n = h.n;
  h.p_alpha.assign(n, 0.0f);
  h.s.assign(n, 0.0f);
  h.p_beta.assign(n, 0.0f);
  h.coef.assign(n * n, 0.0f);
  Buffer d_beta(n, 0.0f), k(n, 0.0f);  // row t of D^β and of K, updated in place
  for (int64_t t = 0; t < n; ++t) {
    h.p_alpha[t] = t == 0 ? alpha[0] : alpha[t] * h.p_alpha[t - 1];
    h.p_beta[t] = t == 0 ? beta[0] : beta[t] * h.p_beta[t - 1];
    h.s[t] = t == 0 ? h.p_beta[0] : alpha[t] * h.s[t - 1] + h.p_beta[t];
#pragma GCC ivdep
    for (int64_t r = 0; r < t; ++r) {
      d_beta[r] *= beta[t];
      k[r] = alpha[t] * k[r] + d_beta[r];
    }
    d_beta[t] = 1.0f;
    k[t] = 1.0f;
#pragma GCC ivdep
    for (int64_t r = 0; r <= t; ++r) h.coef[t * n + r] = k[r] * eta[r];
  }
  h.d_beta_last = d_beta;
}

// Key e's coefficient in the sum over r of `row`[r]·g_r: Σ_j row[e−j]·u[e−j, j], u the slots'
// weights (with the clip), for every e of the m keys, into out[e·stride].
void fold_slots(const float* row, const float* u, int64_t n, int64_t c, float* out, int64_t stride = 1) {
  const int64_t m = n + c - 1;
  for (int64_t e = 0; e < m; ++e) {
    float sum = 0;
    for (int64_t j = std::max<int64_t>(0, e - (n - 1)); j < c && j <= e; ++j)
      sum += row[e - j] * u[(e - j) * c + j];
    out[e * stride] = sum;
  }
}

// One head's chunk, steps 1-5 below: y [n,d] token-major into y_out, and the head's W_n and S_n into
// out_ptrs {W_1, W_2, S_1, S_2} (each [B,H,…], at this head's offset).
void run_head(const ChunkHead& shape, const MlpChunkInputs& in, const std::vector<float*>& out_ptrs,
              float* y_out, int64_t bh, int64_t head, const float* alpha, const float* eta, const float* beta,
              double clip, Scratch& scratch) {
  ChunkHead h = shape;
  scratch.restart();
  const int64_t n = h.n, c = h.c, m = h.m, d = h.d, hd = h.hidden, w = d * hd;
  const int ni = static_cast<int>(n), mi = static_cast<int>(m), di = static_cast<int>(d),
            hi = static_cast<int>(hd);
  recurrences(h, alpha, eta, beta);

  const float* keys = in.keys.data_ptr<float>() + bh * m * d;  // [m,d]
  const float* values = in.values.data_ptr<float>() + bh * m * d;
  const float* queries = in.queries.data_ptr<float>() + bh * n * d;  // [n,d]
  const float* slot_weights = in.slot_weights.data_ptr<float>() + bh * n * c;
  const float* bar1 = in.gradient_point[0].data_ptr<float>() + bh * w;  // W̄_1 [d,hd]
  const float* bar2 = in.gradient_point[1].data_ptr<float>() + bh * w;  // W̄_2 [hd,d]
  const float* w1 = in.memory[0].data_ptr<float>() + bh * w;
  const float* w2 = in.memory[1].data_ptr<float>() + bh * w;
  const float* s1 = in.momentum[0].data_ptr<float>() + bh * w;
  const float* s2 = in.momentum[1].data_ptr<float>() + bh * w;
  const float* ln_weight = in.ln_weight.data_ptr<float>() + head * d;
  const float* ln_bias = in.ln_bias.data_ptr<float>() + head * d;

  // 1. Every key's pass at W̄ and its backward, feature-major: h, a [hd,m]; n̂, δo [d,m]; δh [hd,m].
  float *keys_t = scratch.take(d * m), *h_keys = scratch.take(hd * m), *a_keys = scratch.take(hd * m),
        *n_keys = scratch.take(d * m), *delta_o = scratch.take(d * m), *delta_h = scratch.take(hd * m);
  float *mean = scratch.take(std::max(m, n)), *stdev = scratch.take(std::max(m, n));
  transpose(keys, m, d, keys_t);
  small_gemm(bar2, di, 1, keys_t, nullptr, h_keys, hi, di, mi, 1.0f, 0.0f);  // W̄_2 φ
  gelu_array(h_keys, a_keys, hd * m);
  small_gemm(bar1, hi, 1, a_keys, nullptr, n_keys, di, hi, mi, 1.0f, 0.0f);  // W̄_1 a
  normalise_columns(n_keys, d, m, mean, stdev);
  // δn = γ_LN (y − v) with y = φ + γ_LN n̂ + β_LN; δo = (δn − mean δn − n̂·mean(δn n̂))/σ.
  float *mean_dn = scratch.take(m), *mean_dn_n = scratch.take(m);
  std::fill_n(mean_dn, m, 0.0f);
  std::fill_n(mean_dn_n, m, 0.0f);
  for (int64_t i = 0; i < d; ++i)
#pragma GCC ivdep
    for (int64_t e = 0; e < m; ++e) {
      const float nhat = n_keys[i * m + e];
      const float dn =
          ln_weight[i] * (keys[e * d + i] + ln_weight[i] * nhat + ln_bias[i] - values[e * d + i]);
      delta_o[i * m + e] = dn;
      mean_dn[e] += dn;
      mean_dn_n[e] += dn * nhat;
    }
  for (int64_t i = 0; i < d; ++i)
#pragma GCC ivdep
    for (int64_t e = 0; e < m; ++e)
      delta_o[i * m + e] = (delta_o[i * m + e] - mean_dn[e] / static_cast<float>(d) -
                            n_keys[i * m + e] * mean_dn_n[e] / static_cast<float>(d)) /
                           stdev[e];
  small_gemm(bar1, 1, hi, delta_o, nullptr, delta_h, hi, di, mi, 1.0f, 0.0f);  // W̄_1ᵀ δo
  multiply_by_gelu_derivative(h_keys, delta_h, hd * m);

  // 2. The slots' weights u[t,j] = w_{t,j}·f_t, f_t token t's clip factor (SPEC §4): ‖g_t‖² over its
  // window's rank-1 terms is Σ_{j,k} u_j u_k ((δo_j·δo_k)(a_j·a_k) + (δh_j·δh_k)(φ_j·φ_k)).
  float* u = scratch.take(n * c);
  std::copy_n(slot_weights, n * c, u);
  if (clip > 0) {
    float *gram_o = scratch.take(m * m), *gram_a = scratch.take(m * m), *gram_h = scratch.take(m * m),
          *gram_phi = scratch.take(m * m);
    small_gemm(delta_o, 1, mi, delta_o, nullptr, gram_o, mi, di, mi, 1.0f, 0.0f, true);
    small_gemm(a_keys, 1, mi, a_keys, nullptr, gram_a, mi, hi, mi, 1.0f, 0.0f, true);
    small_gemm(delta_h, 1, mi, delta_h, nullptr, gram_h, mi, hi, mi, 1.0f, 0.0f, true);
    small_gemm(keys, di, 1, keys_t, nullptr, gram_phi, mi, di, mi, 1.0f, 0.0f, true);
    for (int64_t t = 0; t < n; ++t) {
      float norm_sq = 0;
      for (int64_t j = 0; j < c; ++j)
        for (int64_t k = 0; k < c; ++k) {
          const int64_t pair = (t + j) * m + (t + k);
          norm_sq += slot_weights[t * c + j] * slot_weights[t * c + k] *
                     (gram_o[pair] * gram_a[pair] + gram_h[pair] * gram_phi[pair]);
        }
      // inner_clip.cpp's min(clip/‖g‖, 1) with its floor; comparisons that keep a NaN.
      norm_sq = norm_sq < 1e-30f ? 1e-30f : norm_sq;
      float factor = static_cast<float>(clip) / std::sqrt(norm_sq);
      factor = factor > 1.0f ? 1.0f : factor;
      for (int64_t j = 0; j < c; ++j) u[t * c + j] *= factor;
    }
  }

  // 3. The per-key coefficients: E[t,e] of the row each token reads (its own after the write, the
  // one before otherwise), and the chunk end's for W_n (last) and S_n (momentum_end).
  // E is kept transposed, fold[e·n + t], for the products with (φ_e·q_t) and (a_e·a_q,t) below.
  float *fold = scratch.take(m * n), *last = scratch.take(m), *momentum_end = scratch.take(m), *row = scratch.take(n);
  float *start = scratch.take(n), *moment = scratch.take(n);  // P_t and s_t of the row read
  std::fill_n(fold, m * n, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t r = h.read_after ? t : t - 1;
    start[t] = r < 0 ? 1.0f : h.p_alpha[r];
    moment[t] = r < 0 ? 0.0f : h.s[r];
    if (r >= 0) fold_slots(h.coef.data() + r * n, u, n, c, fold + t, n);
  }
  fold_slots(h.coef.data() + (n - 1) * n, u, n, c, last);
  for (int64_t r = 0; r < n; ++r) row[r] = h.d_beta_last[r] * eta[r];
  fold_slots(row, u, n, c, momentum_end);

  // 4. The read. Layer 2: H_q = W_2,0 Q·P − S_2,0 Q·s − Σ_e δh_e (E ⊙ φ_e·q), with Q = [q_t] [d,n].
  float *q_start = scratch.take(d * n), *q_moment = scratch.take(d * n), *products = scratch.take(m * n),
        *h_q = scratch.take(hd * n), *a_q = scratch.take(hd * n), *o_q = scratch.take(d * n),
        *o_s = scratch.take(d * n), *o_mix = scratch.take(d * n);
  float* q_t = scratch.take(d * n);
  transpose(queries, n, d, q_t);
  for (int64_t i = 0; i < d; ++i)
#pragma GCC ivdep
    for (int64_t t = 0; t < n; ++t) {
      q_start[i * n + t] = q_t[i * n + t] * start[t];
      q_moment[i * n + t] = -q_t[i * n + t] * moment[t];
    }
  // (φ_e·q_t)·(−E[t,e]): [m,n].
  small_gemm(keys, di, 1, q_t, nullptr, products, mi, di, ni, 1.0f, 0.0f);
  for (int64_t e = 0; e < m; ++e)
#pragma GCC ivdep
    for (int64_t t = 0; t < n; ++t) products[e * n + t] *= -fold[e * n + t];
  small_gemm(w2, di, 1, q_start, nullptr, h_q, hi, di, ni, 1.0f, 0.0f);
  small_gemm(s2, di, 1, q_moment, h_q, h_q, hi, di, ni, 1.0f, 1.0f);
  small_gemm(delta_h, mi, 1, products, h_q, h_q, hi, mi, ni, 1.0f, 1.0f);
  gelu_array(h_q, a_q, hd * n);
  // Layer 1: O_q = P·(W_1,0 A_q) − s·(S_1,0 A_q) − Σ_e δo_e (E ⊙ a_e·a_q).
  small_gemm(a_keys, 1, mi, a_q, nullptr, products, mi, hi, ni, 1.0f, 0.0f);
  for (int64_t e = 0; e < m; ++e)
#pragma GCC ivdep
    for (int64_t t = 0; t < n; ++t) products[e * n + t] *= -fold[e * n + t];
  small_gemm(w1, hi, 1, a_q, nullptr, o_q, di, hi, ni, 1.0f, 0.0f);
  small_gemm(s1, hi, 1, a_q, nullptr, o_s, di, hi, ni, 1.0f, 0.0f);
  small_gemm(delta_o, mi, 1, products, nullptr, o_mix, di, mi, ni, 1.0f, 0.0f);
  for (int64_t i = 0; i < d; ++i)
#pragma GCC ivdep
    for (int64_t t = 0; t < n; ++t)
      o_q[i * n + t] = start[t] * o_q[i * n + t] - moment[t] * o_s[i * n + t] + o_mix[i * n + t];
  normalise_columns(o_q, d, n, mean, stdev);
  for (int64_t t = 0; t < n; ++t)  // y = φ_q + γ_LN n̂ + β_LN, token-major
    for (int64_t i = 0; i < d; ++i)
      y_out[t * d + i] = queries[t * d + i] + ln_weight[i] * o_q[i * n + t] + ln_bias[i];

  // 5. The chunk end: W_n = P_n W_0 − s_n S_0 − Σ_e last_e δ_e ⊗ x_e, S_n = P^β_n S_0 + Σ_e
  // momentum_end_e δ_e ⊗ x_e, with (δ, x) = (δo, a) for W_1 and (δh, φ) for W_2.
  float *a_rows = scratch.take(m * hd), *scaled = scratch.take(hd * m);
  transpose(a_keys, hd, m, a_rows);
  const float p_end = h.p_alpha[n - 1], s_end = h.s[n - 1], beta_end = h.p_beta[n - 1];
  auto weight_end = [&](const float* w0, const float* s0, const float* delta, int rows, int cols,
                        const float* inputs, float* w_new, float* s_new) {
#pragma GCC ivdep
    for (int64_t i = 0; i < static_cast<int64_t>(rows) * cols; ++i) w_new[i] = p_end * w0[i] - s_end * s0[i];
    for (int64_t i = 0; i < rows; ++i)
#pragma GCC ivdep
      for (int64_t e = 0; e < m; ++e) scaled[i * m + e] = delta[i * m + e] * last[e];
    small_gemm(scaled, mi, 1, inputs, w_new, w_new, rows, mi, cols, -1.0f, 1.0f);
    for (int64_t i = 0; i < rows; ++i)
#pragma GCC ivdep
      for (int64_t e = 0; e < m; ++e) scaled[i * m + e] = delta[i * m + e] * momentum_end[e];
    small_gemm(scaled, mi, 1, inputs, s0, s_new, rows, mi, cols, 1.0f, beta_end);
  };
  weight_end(w1, s1, delta_o, di, hi, a_rows, out_ptrs[0] + bh * w, out_ptrs[2] + bh * w);
  weight_end(w2, s2, delta_h, hi, di, keys, out_ptrs[1] + bh * w, out_ptrs[3] + bh * w);
}

}  // namespace

MlpChunkOutputs fused_mlp_chunk(const MlpChunkInputs& raw) {
  auto f32 = [](const at::Tensor& t) { return t.to(at::kFloat).contiguous(); };
  MlpChunkInputs in = raw;
  for (at::Tensor* t : {&in.keys, &in.values, &in.slot_weights, &in.queries, &in.alpha, &in.eta, &in.beta,
                        &in.ln_weight, &in.ln_bias})
    *t = f32(*t);
  for (auto* list : {&in.gradient_point, &in.memory, &in.momentum})
    for (auto& t : *list) t = f32(t);
  const int64_t B = in.queries.size(0), H = in.queries.size(1), n = in.queries.size(2),
                d = in.queries.size(3);
  const int64_t c = in.slot_weights.size(3), hidden = in.memory[0].size(-1);
  TORCH_CHECK(in.keys.size(2) == n + c - 1, "fused_mlp_chunk: expected ", n + c - 1, " keys, got ",
              in.keys.size(2));
  MlpChunkOutputs out;
  out.y = at::empty({B, H, n, d}, in.queries.options());
  for (int i = 0; i < 2; ++i) {
    out.memory.push_back(at::empty_like(in.memory[i]));
    out.momentum.push_back(at::empty_like(in.momentum[i]));
  }
  const std::vector<float*> out_ptrs{out.memory[0].data_ptr<float>(), out.memory[1].data_ptr<float>(),
                                     out.momentum[0].data_ptr<float>(), out.momentum[1].data_ptr<float>()};
  const ChunkHead shape{n, c, n + c - 1, d, hidden, in.read_after_write, {}, {}, {}, {}, {}};
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    thread_local Scratch scratch;
    for (int64_t bh = begin; bh < end; ++bh)
      run_head(shape, in, out_ptrs, out.y.data_ptr<float>() + bh * n * d, bh, bh % H,
               in.alpha.data_ptr<float>() + bh * n, in.eta.data_ptr<float>() + bh * n,
               in.beta.data_ptr<float>() + bh * n, in.inner_clip, scratch);
  });
  return out;
}

}  // namespace memscope::model
