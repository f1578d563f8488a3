// One token of HOPE's self-modifying memories without autograd, on the CPU in float32: the
// debugger's step (self_modifying_memory.h; the chunkwise form's chunk_aten for one token). Its ATen
// form is some 700 calls a token, 0.6 ms of dispatch at demo-mqar-hope's width for about 1.5 MFLOP.
// Here, per sequence, with R the memories the writes read (the chunk start's) and W the current ones
// (the same outside a continued chunk), as loops (mlp_head_kernels.h):
//   k, v, η, α from M_k, M_v, M_η, M_α at x (R), q = W_q x;  model.hope.conv's taps over the last
//   four [q|k|v];  k, q normalised;  η = max_lr·gate(·+ b_η),  α = gate(·+ b_α)
//   targets sg(M_□(v)) (R), v for the memory;  every memory's pass at k (R), ψ = (M_□(k) − v̂_□)/d,
//   δo, δh (mlp_deltas), clipped together by κ = min(1, clip/‖g‖), ‖g‖² = ‖δo‖²‖a‖² + ‖δh‖²‖k‖²
//   dgd with p = α − r⊙k² (r = η, or self_lr_scale·η for the four projections):
//     W_1 ← diag(p) W_1 − (r⊙κδo) ⊗ a,  W_2 ← W_2 diag(p) − κδh ⊗ (r⊙k)
//   y = M(q) at the memory's new weights, which the chunk form gets from W and the write (the dual form).
// New stacks for the new weights: the engine keeps earlier states. The result equals chunk_aten's
// to float32 rounding (tests/model/test_self_modifying_memory.cpp).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "model/memory/mlp_head_kernels.h"
#include "model/memory/self_modifying_memory.h"
#include "model/util/cpu_kernels.h"
#include "model/util/simd_clones.h"
#include "model/util/sum_of_squares.h"

namespace memscope::model {

namespace {

constexpr int kMain = static_cast<int>(SelfModMemory::Main);
constexpr int kProjections = 4;

// z ← z / max(‖z‖, 1e-12), as unit() in the ATen form.
void normalise(float* z, int64_t n) {
  const float norm = std::max(static_cast<float>(std::sqrt(squares_of(z, n))), 1e-12f);
  for (int64_t i = 0; i < n; ++i) z[i] /= norm;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// out = sigmoid(logits + bias) per feature, or (shared) the sigmoid of their mean for every feature.
void gate_values(const float* logits, const float* bias, int64_t d, bool shared, float scale, float* out) {
  if (!shared) {
    for (int64_t i = 0; i < d; ++i) out[i] = scale * sigmoid(logits[i] + bias[i]);
    return;
  }
  float mean = 0;
  for (int64_t i = 0; i < d; ++i) mean += logits[i] + bias[i];
  std::fill_n(out, d, scale * sigmoid(mean / static_cast<float>(d)));
}

// The decayed rank-1 writes of one memory: W_1' = diag(p) W_1 − u ⊗ a, with u = r⊙κδo [d];
// W_2' = W_2 diag(p) − e ⊗ c, with e = κδh [hidden] and c = r⊙k [d].
MEMSCOPE_SIMD_CLONES
void decayed_rank_one_writes(const float* __restrict w1, const float* __restrict w2,
                             const float* __restrict p, const float* __restrict u, const float* __restrict a,
                             const float* __restrict e, const float* __restrict c, int64_t d, int64_t hidden,
                             float* __restrict w1_out, float* __restrict w2_out) {
  for (int64_t i = 0; i < d; ++i) {
    const float decay = p[i], scale = u[i];
    const float* row = w1 + i * hidden;
    float* out = w1_out + i * hidden;
    for (int64_t j = 0; j < hidden; ++j) out[j] = row[j] * decay - scale * a[j];
  }
  for (int64_t j = 0; j < hidden; ++j) {
    const float scale = e[j];
    const float* row = w2 + j * d;
    float* out = w2_out + j * d;
    for (int64_t i = 0; i < d; ++i) out[i] = row[i] * p[i] - scale * c[i];
  }
}

}  // namespace

bool SelfModifyingMemoryImpl::fused_token_applies(const at::Tensor& x, const std::array<at::Tensor, 2>& base,
                                                  const std::array<at::Tensor, 2>& chunk_start) const {
  if (at::GradMode::is_enabled() || x.dim() != 3 || x.size(1) != 1 || !cpu_kernel_float(x)) return false;
  for (const at::Tensor* t : {&w_q, &b_lr, &b_retain})
    if (!cpu_kernel_float(*t)) return false;
  if (options_.conv && !cpu_kernel_float(conv_weight)) return false;
  for (int m = 0; m < kSelfModCount; ++m)
    if (!cpu_kernel_float(ln_weight[m]) || !cpu_kernel_float(ln_bias[m])) return false;
  for (const auto* stacks : {&base, &chunk_start})
    for (const at::Tensor& w : *stacks)
      if (!cpu_kernel_float(w) || w.dim() != 4 || w.size(0) != x.size(0) || w.size(1) != kSelfModCount)
        return false;
  return true;
}

SelfModifyingMemoryImpl::ChunkEnd SelfModifyingMemoryImpl::fused_token(
    const at::Tensor& x_in, SelfModState& state, const std::array<at::Tensor, 2>& base,
    const std::array<at::Tensor, 2>& chunk_start) const {
  const int64_t B = x_in.size(0), d = options_.d_model, hidden = 4 * d, size = d * hidden;
  const auto options = x_in.options();
  const at::Tensor x_all = x_in.contiguous();
  const at::Tensor read1 = chunk_start[0].contiguous(), read2 = chunk_start[1].contiguous();
  const at::Tensor from1 = base[0].contiguous(), from2 = base[1].contiguous();
  const at::Tensor wq = w_q.contiguous(), lr_bias = b_lr.contiguous(), retain_bias = b_retain.contiguous();
  const at::Tensor taps = options_.conv ? conv_weight.contiguous() : at::Tensor();
  std::vector<at::Tensor> gains, shifts;
  for (int m = 0; m < kSelfModCount; ++m) {
    gains.push_back(ln_weight[m].contiguous());
    shifts.push_back(ln_bias[m].contiguous());
  }
  auto head = [&](int m) {
    return MlpHead{d, hidden, gains[static_cast<size_t>(m)].data_ptr<float>(),
                   shifts[static_cast<size_t>(m)].data_ptr<float>()};
  };

  ChunkEnd end;
  end.w1 = at::empty_like(from1);
  end.w2 = at::empty_like(from2);
  end.y = at::empty({B, 1, d}, options);
  end.error = at::empty({B, kSelfModCount}, options);
  end.retain = at::empty({B, d}, options);
  end.lr = at::empty({B, d}, options);
  end.precond = at::empty({B, d}, options);
  const at::Tensor conv_old = options_.conv ? state.conv.contiguous() : at::Tensor();
  const at::Tensor conv_new = options_.conv ? at::empty_like(conv_old) : at::Tensor();
  at::Tensor aux = state.aux.clone();

  // Scratch: a pass's h, a, n, σ and y over two rows; q|k|v before and after the conv; the projections' and
  // targets' outputs; every memory's pass at k and its deltas.
  std::vector<float> rows(2 * d), h(2 * hidden), a(2 * hidden), n(2 * d), stdev(2), out(2 * d), qkv(3 * d),
      mixed(3 * d), projected(kProjections * d), target(kSelfModCount * d), h_k(kSelfModCount * hidden),
      a_k(h_k.size()), n_k(kSelfModCount * d), stdev_k(kSelfModCount), y_k(n_k.size()), psi(d),
      delta_o(kSelfModCount * d), delta_h(h_k.size()), eta(d), alpha(d), rate(d), p(d), u(d), c(d);
  for (int64_t b = 0; b < B; ++b) {
    const float* x = x_all.data_ptr<float>() + b * d;
    auto r1 = [&](int m) { return read1.data_ptr<float>() + (b * kSelfModCount + m) * size; };
    auto r2 = [&](int m) { return read2.data_ptr<float>() + (b * kSelfModCount + m) * size; };

    // k, v, η, α at the chunk-start projections; q static.
    for (int m = 0; m < kProjections; ++m)
      mlp_forward(head(m), x, 1, r1(m), r2(m), h.data(), a.data(), n.data(), stdev.data(),
                  projected.data() + m * d);
    matvec(wq.data_ptr<float>(), x, d, d, qkv.data());
    std::copy_n(projected.data(), 2 * d, qkv.data() + d);  // M_k(x), M_v(x)
    if (options_.conv) {
      // The last four [q|k|v] (three carried), each channel through its four taps in order.
      const float* window = conv_old.data_ptr<float>() + b * 3 * 3 * d;
      const float* tap = taps.data_ptr<float>();
      for (int64_t ch = 0; ch < 3 * d; ++ch) {
        float sum = 0;
        for (int64_t t = 0; t < 3; ++t) sum += window[t * 3 * d + ch] * tap[ch * 4 + t];
        mixed[ch] = sum + qkv[ch] * tap[ch * 4 + 3];
      }
      float* carried = conv_new.data_ptr<float>() + b * 3 * 3 * d;
      std::copy_n(window + 3 * d, 2 * 3 * d, carried);
      std::copy_n(qkv.data(), 3 * d, carried + 2 * 3 * d);
    } else {
      mixed = qkv;
    }
    float* q = mixed.data();
    float* k = mixed.data() + d;
    const float* v = mixed.data() + 2 * d;
    normalise(q, d);
    normalise(k, d);
    gate_values(projected.data() + 2 * d, lr_bias.data_ptr<float>(), d, options_.shared_gates,
                static_cast<float>(options_.max_lr), eta.data());
    gate_values(projected.data() + 3 * d, retain_bias.data_ptr<float>(), d, options_.shared_gates, 1.0f,
                alpha.data());

    // Targets: sg(M_□(v)) for the projections, v for the memory; and every memory's pass at k. A
    // projection reads v and k in one pass over its weights (rows [v; k]), whose second row is kept.
    std::copy_n(v, d, rows.data());
    std::copy_n(k, d, rows.data() + d);
    for (int m = 0; m < kSelfModCount; ++m) {
      if (m == kMain) {
        std::copy_n(v, d, target.data() + m * d);
        mlp_forward(head(m), k, 1, r1(m), r2(m), h_k.data() + m * hidden, a_k.data() + m * hidden,
                    n_k.data() + m * d, stdev_k.data() + m, y_k.data() + m * d);
        continue;
      }
      mlp_forward(head(m), rows.data(), 2, r1(m), r2(m), h.data(), a.data(), n.data(), stdev.data(),
                  out.data());
      std::copy_n(out.data(), d, target.data() + m * d);
      std::copy_n(h.data() + hidden, hidden, h_k.data() + m * hidden);
      std::copy_n(a.data() + hidden, hidden, a_k.data() + m * hidden);
      std::copy_n(n.data() + d, d, n_k.data() + m * d);
      stdev_k[static_cast<size_t>(m)] = stdev[1];
      std::copy_n(out.data() + d, d, y_k.data() + m * d);
    }

    // seed 004 change 1's auxiliary loss at the chunk-start memory: both of its terms are ‖M(k) − v‖²/d.
    float retrieval = 0;
    for (int64_t i = 0; i < d; ++i) retrieval += (y_k[kMain * d + i] - v[i]) * (y_k[kMain * d + i] - v[i]);
    retrieval /= static_cast<float>(d);
    aux.data_ptr<float>()[b] += retrieval + retrieval;

    for (int m = 0; m < kSelfModCount; ++m) {
      const float* got = y_k.data() + m * d;
      const float* want = target.data() + m * d;
      float loss = 0;
      for (int64_t i = 0; i < d; ++i) {
        const float residual = got[i] - want[i];
        loss += residual * residual;
        psi[i] = residual / static_cast<float>(d);
      }
      end.error.data_ptr<float>()[b * kSelfModCount + m] = 0.5f * loss / static_cast<float>(d);
      float* d_o = delta_o.data() + m * d;
      float* d_h = delta_h.data() + m * hidden;
      mlp_deltas(head(m), psi.data(), h_k.data() + m * hidden, n_k.data() + m * d, stdev_k[m], r1(m), d_o,
                 d_h);
      const float factor =
          mlp_clip_factor(head(m), d_o, a_k.data() + m * hidden, d_h, k, options_.inner_clip);
      const float scale = m == kMain ? 1.0f : static_cast<float>(options_.self_lr_scale);
      for (int64_t i = 0; i < d; ++i) {
        rate[i] = scale * eta[i];
        p[i] = alpha[i] - rate[i] * k[i] * k[i];
        u[i] = rate[i] * (factor * d_o[i]);
        c[i] = rate[i] * k[i];
      }
      for (int64_t j = 0; j < hidden; ++j) d_h[j] *= factor;
      const int64_t offset = (b * kSelfModCount + m) * size;
      decayed_rank_one_writes(from1.data_ptr<float>() + offset, from2.data_ptr<float>() + offset, p.data(),
                              u.data(), a_k.data() + m * hidden, d_h, c.data(), d, hidden,
                              end.w1.data_ptr<float>() + offset, end.w2.data_ptr<float>() + offset);
      if (m == kMain) std::copy_n(p.data(), d, end.precond.data_ptr<float>() + b * d);
    }
    std::copy_n(alpha.data(), d, end.retain.data_ptr<float>() + b * d);
    std::copy_n(eta.data(), d, end.lr.data_ptr<float>() + b * d);

    // y = M(q), read after the write.
    const int64_t main = (b * kSelfModCount + kMain) * size;
    mlp_forward(head(kMain), q, 1, end.w1.data_ptr<float>() + main, end.w2.data_ptr<float>() + main, h.data(),
                a.data(), n.data(), stdev.data(), end.y.data_ptr<float>() + b * d);
  }
  state.aux = aux;
  if (options_.conv) state.conv = conv_new;
  return end;
}

}  // namespace memscope::model
