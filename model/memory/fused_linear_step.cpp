// The sequential step of the common linear rules, fused (issue 20). A step of Titans'
// or DeltaNet's rule (linear memory, l2 bias, window c = 1, gd with momentum or dgd, l2-decay or
// no retention, identity features) is a few thousand multiply-adds per head; step() spends ~100 µs
// on the ~300 ATen calls that spell it out. Here one GEMM projects q, k, v and the gates, and one
// loop per head does the rest (SPEC §2, §4, §5 in the order sequential_step.cpp computes them):
//   φ = z/max(‖z‖, 1e-12),  ψ = s·(M φ_k − v),  S ← β S + η ψ φ_kᵀ,  M ← α M − S,  y = M φ_q
// (dgd: M ← α M − η ψ φ_kᵀ; read before the write when the rule says so). It allocates the new
// M and S rather than writing in place: frames and keyframes may hold the old ones.
//
// Atlas's rules (an Omega window, polynomial features, Muon) go on from the projection to
// fused_window_step.cpp, and the MLP memory's to fused_mlp_step.cpp.
//
// The result equals step()'s to float32 rounding (the sums run in another order), which
// tests/model/test_fused_step.cpp checks on every rule this path takes.
#include <ATen/ATen.h>

#include <array>
#include <cmath>

#include "model/memory/attentional_bias.h"
#include "model/memory/fused_step_state.h"
#include "model/memory/memory_layer.h"
#include "model/util/cpu_kernels.h"
#include "model/util/weight_key.h"

namespace memscope::model {

namespace {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// z / max(‖z‖₂, 1e-12) in place, as features() with the identity map.
void normalise(float* z, int64_t d) {
  double squares = 0;
  for (int64_t i = 0; i < d; ++i) squares += static_cast<double>(z[i]) * z[i];
  const float norm = std::max(static_cast<float>(std::sqrt(squares)), 1e-12f);
  for (int64_t i = 0; i < d; ++i) z[i] /= norm;
}

}  // namespace

bool MemoryLayerImpl::fused_step_applies(const at::Tensor& x_t, const MemoryState& state, int64_t chunk) const {
  const MemoryRule& r = rule_;
  bool overridden = false;
  for (const auto& o : overrides_) overridden = overridden || o.mode != GateOverride::Mode::Off;
  // A probed step is fused too: it fills the record (allocate_fused_record) that the probes read.
  // Grad mode (stepping into a training batch) needs the general path's autograd graph.
  // The MLP memory (fused_mlp_step.cpp) takes gd with momentum and Muon; dgd's preconditioner
  // stays on the general path.
  const bool mlp = r.structure == Structure::Mlp;
  bool float_weights = state.memory.size() == (mlp ? 2u : 1u);
  for (const auto& m : state.memory) float_weights = float_weights && m.scalar_type() == at::kFloat;
  return fused_step_on_ && (chunk == 1 || window_step_rule()) && !at::GradMode::is_enabled() && !overridden &&
         r.bias == Bias::L2 &&
         (r.feature_map == FeatureMapKind::Identity || r.feature_map == FeatureMapKind::Poly) &&
         r.gamma != WindowWeights::Gated &&
         (r.optimiser == Optimiser::GdMomentum || r.optimiser == Optimiser::Muon ||
          (r.optimiser == Optimiser::Dgd && !mlp && !r.dgd_per_feature && r.window == 1 &&
           r.feature_map == FeatureMapKind::Identity)) &&  // fused_window_step has no dgd
         (r.retention == Retention::L2Decay || r.retention == Retention::None) &&
         feature_dim_ == head_dim_ && cpu_kernels_on(x_t.device()) && x_t.scalar_type() == at::kFloat &&
         float_weights && !state.latent.defined();
}

bool MemoryLayerImpl::window_step_rule() const {
  return rule_.structure == Structure::Mlp || rule_.window > 1 || rule_.optimiser == Optimiser::Muon ||
         rule_.feature_map != FeatureMapKind::Identity;
}

const at::Tensor& MemoryLayerImpl::fused_projection() const {
  const std::array<const at::Tensor*, 6> parts{&w_q, &w_k, &w_v, &gate_w[static_cast<int>(Gate::Retain)],
                                               &gate_w[static_cast<int>(Gate::Lr)],
                                               &gate_w[static_cast<int>(Gate::Momentum)]};
  if (weights_changed(fused_projection_key_, parts)) {  // a training step, a checkpoint load
    std::vector<at::Tensor> defined;  // an unused gate is undefined
    for (const at::Tensor* p : parts)
      if (p->defined()) defined.push_back(*p);
    fused_projection_ = at::cat(defined, 0).t().contiguous();  // [D, 3W + gates·H]
  }
  return fused_projection_;
}

StepOutput MemoryLayerImpl::fused_step(const at::Tensor& x_t, MemoryState& state, StepDetail detail,
                                       int64_t chunk) const {
  const int64_t B = x_t.size(0), H = heads_, d = head_dim_, W = H * d;
  const at::Tensor projected = at::mm(x_t.contiguous(), fused_projection());  // [B, 3W + gates·H]
  const int64_t columns = projected.size(1);
  const float* proj = projected.data_ptr<float>();

  // The causal conv's window: the 3 tokens before this one, then this one (SPEC §2).
  at::Tensor qkv = at::empty({B, 3 * W}, x_t.options());
  float* out = qkv.data_ptr<float>();
  if (rule_.conv) {
    const at::Tensor previous = state.conv.to(at::kFloat).contiguous();  // [B,3,3W]
    const float* prev = previous.data_ptr<float>();
    const at::Tensor taps = conv_weight.contiguous();
    const float* w = taps.data_ptr<float>();  // [3W,4]
    at::Tensor next = at::empty({B, 3, 3 * W}, x_t.options());
    float* kept = next.data_ptr<float>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < 3 * W; ++c) {
        const float* p = prev + b * 9 * W + c;
        const float now = proj[b * columns + c];
        float sum = p[0] * w[c * 4 + 0];
        sum += p[3 * W] * w[c * 4 + 1];
        sum += p[6 * W] * w[c * 4 + 2];
        sum += now * w[c * 4 + 3];
        out[b * 3 * W + c] = sum;
        kept[b * 9 * W + c] = p[3 * W];
        kept[b * 9 * W + 3 * W + c] = p[6 * W];
        kept[b * 9 * W + 6 * W + c] = now;
      }
    state.conv = next.to(state.conv.dtype());
  } else {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < 3 * W; ++c) out[b * 3 * W + c] = proj[b * columns + c];
  }

  // The gates, in the order fused_projection() stacked them: logits + bias, squashed.
  auto gate_column = [&](Gate g) -> int64_t {
    int64_t column = 3 * W;
    for (const Gate before : {Gate::Retain, Gate::Lr, Gate::Momentum}) {
      if (before == g) return gate_w[static_cast<int>(g)].defined() ? column : -1;
      if (gate_w[static_cast<int>(before)].defined()) column += H;
    }
    return -1;
  };
  const int64_t retain_at = gate_column(Gate::Retain), lr_at = gate_column(Gate::Lr),
                momentum_at = gate_column(Gate::Momentum);
  auto bias_of = [&](Gate g) { return gate_b[static_cast<int>(g)].contiguous(); };
  const at::Tensor retain_b = retain_at >= 0 ? bias_of(Gate::Retain) : at::Tensor();
  const at::Tensor lr_b = bias_of(Gate::Lr);
  const at::Tensor momentum_b = momentum_at >= 0 ? bias_of(Gate::Momentum) : at::Tensor();
  const float max_lr = static_cast<float>(rule_.max_lr);
  if (window_step_rule()) {
    // Atlas's rules and the MLP memory: the gates per (sequence, head), then fused_window_step.cpp
    // or fused_mlp_step.cpp.
    std::vector<float> alphas(static_cast<size_t>(B * H)), etas(alphas.size()), betas(alphas.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const float* logits = proj + b * columns;
        const size_t at = static_cast<size_t>(b * H + h);
        alphas[at] = retain_at >= 0 ? sigmoid(logits[retain_at + h] + retain_b.data_ptr<float>()[h]) : 1.0f;
        etas[at] = max_lr * sigmoid(logits[lr_at + h] + lr_b.data_ptr<float>()[h]);
        betas[at] = momentum_at >= 0 ? sigmoid(logits[momentum_at + h] + momentum_b.data_ptr<float>()[h]) : 0.0f;
      }
    return rule_.structure == Structure::Mlp
               ? fused_mlp_step(qkv, alphas, etas, betas, state, detail, chunk)
               : fused_window_step(qkv, alphas, etas, betas, state, detail, chunk);
  }
  const float scale = static_cast<float>(inner_loss_scale(rule_, head_dim_));  // γ = 1 at c = 1
  const bool momentum = rule_.optimiser == Optimiser::GdMomentum;
  const bool read_after = rule_.read == ReadOrder::AfterWrite;
  const float clip = static_cast<float>(rule_.inner_clip);

  const at::Tensor m_old = state.memory[0].contiguous();
  const at::Tensor s_old = state.momentum[0].contiguous();
  at::Tensor m_new = at::empty_like(m_old), s_new = momentum ? at::empty_like(s_old) : s_old;
  at::Tensor y = at::empty({B, H, d}, x_t.options());
  const bool record = detail != StepDetail::OutputOnly, gradients = detail == StepDetail::Record;
  StepRecord rec;
  if (record) {
    rec = allocate_fused_record(B, H, d, 1, x_t.options(), gradients ? WeightShapes{{d, d}} : WeightShapes{});
    // c = 1: γ is the position weight alone.
    std::fill_n(rec.gamma.data_ptr<float>(), B * H, position_weights_float_[0]);
    rec.weight_squares.resize(static_cast<size_t>(B * H * 2));  // [B,H,1 weight,2]
  }
  std::vector<float> phi_k(static_cast<size_t>(d)), phi_q(static_cast<size_t>(d)), psi(static_cast<size_t>(d));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const float* q = out + b * 3 * W + h * d;
      const float* k = q + W;
      const float* v = q + 2 * W;
      std::copy(k, k + d, phi_k.begin());
      std::copy(q, q + d, phi_q.begin());
      normalise(phi_k.data(), d);
      normalise(phi_q.data(), d);
      const float* logits = proj + b * columns;
      const float alpha = retain_at >= 0 ? sigmoid(logits[retain_at + h] + retain_b.data_ptr<float>()[h]) : 1.0f;
      const float eta = max_lr * sigmoid(logits[lr_at + h] + lr_b.data_ptr<float>()[h]);
      const float beta = momentum_at >= 0 ? sigmoid(logits[momentum_at + h] + momentum_b.data_ptr<float>()[h]) : 0.0f;

      const int64_t bh = b * H + h, at = bh * d * d;
      if (record) {
        std::copy(phi_k.begin(), phi_k.end(), rec.phi_k.data_ptr<float>() + bh * d);
        std::copy(phi_q.begin(), phi_q.end(), rec.phi_q.data_ptr<float>() + bh * d);
        std::copy(v, v + d, rec.v.data_ptr<float>() + bh * d);
        rec.retain.data_ptr<float>()[bh] = alpha;
        rec.lr.data_ptr<float>()[bh] = eta;
        rec.momentum.data_ptr<float>()[bh] = beta;
      }
      const float* M = m_old.data_ptr<float>() + at;
      const float* S = s_old.data_ptr<float>() + at;
      float* M2 = m_new.data_ptr<float>() + at;
      float* S2 = momentum ? s_new.data_ptr<float>() + at : nullptr;
      float* out_y = y.data_ptr<float>() + bh * d;
      float loss_before = 0, loss_after = 0;  // L_t = s·½‖M φ_k − v‖² before and after the write
      for (int64_t i = 0; i < d; ++i) {  // ψ = s·(M φ_k − v); the read before the write
        float predicted = 0, read = 0;
        for (int64_t j = 0; j < d; ++j) {
          predicted += M[i * d + j] * phi_k[static_cast<size_t>(j)];
          read += M[i * d + j] * phi_q[static_cast<size_t>(j)];
        }
        psi[static_cast<size_t>(i)] = (predicted - v[i]) * scale;
        loss_before += (predicted - v[i]) * (predicted - v[i]);
        if (!read_after) out_y[i] = read;
      }
      if (clip > 0) {  // SPEC §4's clip (inner_clip.cpp): ‖ψ φ_kᵀ‖_F = ‖ψ‖ ‖φ_k‖ for one token
        float psi_sq = 0, phi_sq = 0;
        for (int64_t i = 0; i < d; ++i) {
          psi_sq += psi[static_cast<size_t>(i)] * psi[static_cast<size_t>(i)];
          phi_sq += phi_k[static_cast<size_t>(i)] * phi_k[static_cast<size_t>(i)];
        }
        const float factor = std::min(clip / std::sqrt(std::max(psi_sq * phi_sq, 1e-30f)), 1.0f);
        for (auto& p : psi) p *= factor;
      }
      float* gradient = gradients ? rec.gradient[0].data_ptr<float>() + at : nullptr;
      for (int64_t i = 0; i < d; ++i) {
        float read = 0, predicted = 0;
        const float p = psi[static_cast<size_t>(i)];
        for (int64_t j = 0; j < d; ++j) {
          const float g = p * phi_k[static_cast<size_t>(j)];
          if (gradients) gradient[i * d + j] = g;
          float u;
          if (momentum) {
            u = beta * S[i * d + j] + eta * g;
            S2[i * d + j] = u;
          } else {
            u = eta * g;
          }
          const float m = alpha * M[i * d + j] - u;
          M2[i * d + j] = m;
          read += m * phi_q[static_cast<size_t>(j)];
          predicted += m * phi_k[static_cast<size_t>(j)];
        }
        if (read_after) out_y[i] = read;
        loss_after += (predicted - v[i]) * (predicted - v[i]);
      }
      if (record) {
        rec.loss_before.data_ptr<float>()[bh] = 0.5f * scale * loss_before;
        rec.loss_after.data_ptr<float>()[bh] = 0.5f * scale * loss_after;
        rec.weight_squares[static_cast<size_t>(bh * 2)] = squares_of(momentum ? S2 : S, d * d);
        rec.weight_squares[static_cast<size_t>(bh * 2 + 1)] = squares_of_difference(M2, M, d * d);
      }
    }
  return finish_fused_step(state, {m_new}, {s_new}, y, std::move(rec));
}

}  // namespace memscope::model
