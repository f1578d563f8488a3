#include "model/memory/memory_layer.h"

#include <cmath>

#include "model/memory/causal_conv.h"
#include "model/memory/feature_map.h"
#include "model/memory/gate_bias.h"
#include "model/memory/mlp_memory.h"
#include "model/memory/retention.h"
#include "model/util/errors.h"

namespace memscope::model {

const char* to_string(Gate gate) {
  switch (gate) {
    case Gate::Retain: return "retain";
    case Gate::Lr: return "lr";
    case Gate::Momentum: return "momentum";
    case Gate::Gamma: return "gamma";
    case Gate::HuberDelta: return "huber_delta";
  }
  return "?";
}

namespace {

bool gate_used(const MemoryRule& r, Gate g) {
  switch (g) {
    case Gate::Retain: return r.retention != Retention::None;
    case Gate::Lr: return true;
    case Gate::Momentum: return r.momentum_enabled && r.optimiser != Optimiser::Dgd;
    case Gate::Gamma: return r.gamma == WindowWeights::Gated;
    case Gate::HuberDelta: return r.bias == Bias::Huber;
  }
  return false;
}

double gate_bias_init(const MemoryRule& r, Gate g) {
  switch (g) {
    case Gate::Retain: return gate_bias::kRetain;
    case Gate::Lr: return gate_bias::kLr;
    case Gate::Momentum: return gate_bias::kMomentum;
    case Gate::Gamma: return gate_bias::kGamma;
    case Gate::HuberDelta: return std::log(std::expm1(r.huber_delta));  // softplus(b) = δ_0
  }
  return 0.0;
}

}  // namespace

MemoryLayerImpl::MemoryLayerImpl(MemoryRule rule, MemoryLayerOptions options) : rule_(std::move(rule)) {
  rule_.validate();
  d_model_ = options.d_model;
  heads_ = options.heads;
  if (d_model_ < 1 || heads_ < 1) throw UserError("memory layer: d_model and heads must be positive");
  head_dim_ = options.head_dim > 0 ? options.head_dim : d_model_ / heads_;
  if (options.head_dim <= 0 && d_model_ % heads_ != 0)
    throw UserError("memory layer: d_model " + std::to_string(d_model_) + " is not divisible by " +
                    std::to_string(heads_) + " heads");
  if (head_dim_ < 1) throw UserError("memory layer: head dimension must be positive");
  feature_dim_ = rule_.feature_dim(head_dim_);

  const int64_t width = heads_ * head_dim_;
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(d_model_));
  w_q = register_parameter("w_q", torch::randn({width, d_model_}) * in_scale);
  w_k = register_parameter("w_k", torch::randn({width, d_model_}) * in_scale);
  w_v = register_parameter("w_v", torch::randn({width, d_model_}) * in_scale);
  if (rule_.conv) {
    // Starts near the identity (last tap 1) so a fresh layer sees each token mostly as itself.
    at::Tensor taps = torch::randn({3 * width, 4}) * 0.1;
    taps.select(1, 3).fill_(1.0);
    conv_weight = register_parameter("conv_weight", taps);
  }
  for (int g = 0; g < kGateCount; ++g) {
    const Gate gate = static_cast<Gate>(g);
    if (!gate_used(rule_, gate)) continue;
    // Per-feature gates (seed 004 change 3) have one row per input feature of M.
    std::vector<int64_t> rows{heads_};
    if (per_feature(gate)) rows.push_back(feature_dim_);
    std::vector<int64_t> w_shape = rows;
    w_shape.push_back(d_model_);
    gate_w[g] = register_parameter(std::string("gate_") + to_string(gate) + "_w", torch::randn(w_shape) * in_scale);
    gate_b[g] = register_parameter(std::string("gate_") + to_string(gate) + "_b",
                                   torch::full(rows, gate_bias_init(rule_, gate)));
  }
  if (rule_.feature_map == FeatureMapKind::Poly) {
    // a_i = 1/i! (Atlas Eq. 5)
    std::vector<double> a;
    double factorial = 1.0;
    for (int64_t i = 1; i <= rule_.poly_degree; ++i) a.push_back(1.0 / (factorial *= static_cast<double>(i)));
    poly_coefficients = register_parameter("poly_coefficients", torch::tensor(a).to(torch::kFloat32),
                                           rule_.poly_learnable);
  }
  if (rule_.structure == Structure::Linear) {
    at::Tensor init;
    switch (rule_.retention) {
      case Retention::Softmax:
        init = torch::zeros({heads_, head_dim_, feature_dim_});  // logits: M_0 rows uniform
        break;
      case Retention::LqNormalize: {
        // A_0 with ‖A_0‖_q = 1, so M_0 = A_0/‖A_0‖_q^{q−2} = A_0 (no jump at the first step).
        init = torch::randn({heads_, head_dim_, feature_dim_});
        init = init / at::linalg_vector_norm(init, rule_.lq_q, {-2, -1}, true);
        break;
      }
      default:
        init = torch::randn({heads_, head_dim_, feature_dim_}) * 0.02;
    }
    m0 = register_parameter("m0", init);
  } else {
    const int64_t d = head_dim_, hidden = 4 * head_dim_;
    w1_0 = register_parameter("w1_0", torch::randn({heads_, d, hidden}) / std::sqrt(static_cast<double>(hidden)));
    w2_0 = register_parameter("w2_0", torch::randn({heads_, hidden, d}) / std::sqrt(static_cast<double>(d)));
    ln_weight = register_parameter("ln_weight", torch::ones({heads_, d}));
    ln_bias = register_parameter("ln_bias", torch::zeros({heads_, d}));
  }
  refresh_position_weights();
}

std::vector<std::string> MemoryLayerImpl::memory_names() const {
  return rule_.structure == Structure::Linear ? std::vector<std::string>{"M"}
                                              : std::vector<std::string>{"W1", "W2"};
}

std::vector<at::Tensor> MemoryLayerImpl::initial_memory(int64_t batch, at::Tensor* latent) const {
  auto expand = [batch](const at::Tensor& p) {
    auto sizes = p.sizes().vec();
    sizes.insert(sizes.begin(), batch);
    return p.unsqueeze(0).expand(sizes).clone();
  };
  if (rule_.structure == Structure::Mlp) return {expand(w1_0), expand(w2_0)};
  switch (rule_.retention) {
    case Retention::Softmax:
      return {softmax_rows(expand(m0))};
    case Retention::LqNormalize: {
      at::Tensor a = expand(m0);
      if (latent) *latent = a;
      return {lq_normalize(a, rule_.lq_q)};
    }
    default:
      return {expand(m0)};
  }
}

MemoryState MemoryLayerImpl::initial_state(int64_t batch) const {
  MemoryState s;
  s.names = memory_names();
  s.memory = initial_memory(batch, &s.latent);
  for (const auto& m : s.memory) s.momentum.push_back(at::zeros_like(m));
  const auto opts = (rule_.structure == Structure::Linear ? m0 : w1_0).options();
  const int64_t c1 = rule_.window - 1;
  s.ring_phi = at::zeros({batch, heads_, c1, feature_dim_}, opts);
  s.ring_v = at::zeros({batch, heads_, c1, head_dim_}, opts);
  s.ring_gamma = at::zeros({batch, heads_, c1}, opts);
  if (rule_.conv) s.conv = at::zeros({batch, 3, 3 * heads_ * head_dim_}, opts);
  return s;
}

void MemoryLayerImpl::reset(MemoryState& state, const std::vector<int64_t>& heads) const {
  const int64_t batch = state.batch();
  MemoryState fresh = initial_state(batch);
  at::Tensor mask = head_mask(heads, heads_, state.memory.front()).to(at::kBool);
  auto pick = [&](const at::Tensor& fresh_t, const at::Tensor& old) {
    std::vector<int64_t> view(old.dim(), 1);
    view[1] = heads_;
    return at::where(mask.view(view), fresh_t, old);
  };
  for (size_t i = 0; i < state.memory.size(); ++i) {
    state.memory[i] = pick(fresh.memory[i], state.memory[i]);
    state.momentum[i] = pick(fresh.momentum[i], state.momentum[i]);
    if (!state.anchor.empty()) state.anchor[i] = pick(fresh.memory[i], state.anchor[i]);
  }
  if (state.latent.defined()) state.latent = pick(fresh.latent, state.latent);
  state.ring_phi = pick(fresh.ring_phi, state.ring_phi);
  state.ring_v = pick(fresh.ring_v, state.ring_v);
  state.ring_gamma = pick(fresh.ring_gamma, state.ring_gamma);
  if (state.conv.defined()) {
    // conv columns are [q|k|v] × heads × d
    at::Tensor c = state.conv.view({batch, 3, 3, heads_, head_dim_});
    at::Tensor keep = (~mask).to(c.scalar_type()).view({1, 1, 1, heads_, 1});
    state.conv = (c * keep).view({batch, 3, 3 * heads_ * head_dim_});
  }
  if (heads.empty() || static_cast<int64_t>(heads.size()) == heads_) {
    state.tokens = 0;
    state.anchor.clear();
    state.anchor_chunk = 0;
  }
}

void MemoryLayerImpl::begin(MemoryState& state, Boundary boundary) const {
  // SPEC §5: `sequence` resets S with every new sequence, `batch` only when a new batch starts,
  // `never` carries S across everything. M, the window and the conv always start afresh.
  const bool keep_momentum = rule_.reset == ResetPolicy::Never ||
                             (rule_.reset == ResetPolicy::Batch && boundary == Boundary::Sequence);
  std::vector<at::Tensor> momentum = state.momentum;
  MemoryState fresh = initial_state(state.batch());
  if (keep_momentum) fresh.momentum = momentum;
  state = fresh;
}

void MemoryLayerImpl::set_override(Gate gate, GateOverride value) {
  if (value.mode != GateOverride::Mode::Off && value.values.size() != 1 &&
      static_cast<int64_t>(value.values.size()) != heads_)
    throw UserError(std::string("override of ") + to_string(gate) + ": needs 1 or " + std::to_string(heads_) +
                    " values, got " + std::to_string(value.values.size()));
  overrides_[static_cast<int>(gate)] = std::move(value);
}

void MemoryLayerImpl::clear_overrides() { overrides_ = {}; }

bool MemoryLayerImpl::per_feature(Gate gate) const {
  return rule_.dgd_per_feature && (gate == Gate::Retain || gate == Gate::Lr);
}

at::Tensor MemoryLayerImpl::apply_override(Gate gate, const at::Tensor& value) const {
  const GateOverride& o = overrides_[static_cast<int>(gate)];
  if (o.mode == GateOverride::Mode::Off) return value;
  // Values are doubles holding the shown float exactly, so a constant equal to the current
  // gate value reproduces it bit for bit (SPEC §9 "Overrides").
  at::Tensor v = at::tensor(o.values, at::TensorOptions().dtype(at::kDouble)).to(value.options());
  if (value.dim() == 4) v = v.unsqueeze(-1);  // per-feature gates: one value per head covers its features
  if (o.mode == GateOverride::Mode::Constant) return v.expand_as(value).clone();
  return value * v;
}

at::Tensor MemoryLayerImpl::gate_value(Gate gate, const at::Tensor& x) const {
  const int g = static_cast<int>(gate);
  auto shape = std::vector<int64_t>{x.size(0), x.size(1), heads_};
  if (per_feature(gate)) shape.push_back(feature_dim_);
  at::Tensor value;
  if (!gate_used(rule_, gate)) {
    // Not learned: retain 1 (retention none), momentum 0 (disabled or dgd), γ 1, δ unused.
    value = gate == Gate::Momentum ? at::zeros(shape, x.options()) : at::ones(shape, x.options());
  } else {
    at::Tensor logits = (at::matmul(x, gate_w[g].flatten(0, -2).t()) + gate_b[g].flatten()).view(shape);
    switch (gate) {
      case Gate::Lr: value = rule_.max_lr * at::sigmoid(logits); break;
      case Gate::HuberDelta: value = at::softplus(logits); break;
      default: value = at::sigmoid(logits);
    }
  }
  return apply_override(gate, value);
}

at::Tensor MemoryLayerImpl::position_weights(const at::TensorOptions& options) const {
  const int64_t c = rule_.window;
  switch (rule_.gamma) {
    case WindowWeights::Uniform:
      return at::full({c}, 1.0 / static_cast<double>(c), options);
    case WindowWeights::Decay: {
      // d^{t−i} for positions oldest..newest, normalised over the full window (SPEC §4).
      at::Tensor age = at::arange(c - 1, -1, -1, options.dtype(at::kDouble));
      at::Tensor w = at::pow(rule_.gamma_decay, age);
      return (w / w.sum()).to(options);
    }
    case WindowWeights::Gated:
      return at::full({c}, 1.0, options);
  }
  return {};
}

ProjectedTokens MemoryLayerImpl::project(const at::Tensor& x, MemoryState& state) const {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == d_model_, "memory layer: expected x of shape [B,T,", d_model_,
              "], got ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), width = heads_ * head_dim_;
  at::Tensor q = at::matmul(x, w_q.t());
  at::Tensor k = at::matmul(x, w_k.t());
  at::Tensor v = at::matmul(x, w_v.t());
  if (rule_.conv) {
    // SPEC §2 / Titans §4.4: depthwise causal conv of width 4, carrying 3 tokens across calls.
    at::Tensor qkv = at::cat({q, k, v}, -1);
    at::Tensor padded = at::cat({state.conv.to(qkv.dtype()), qkv}, 1);
    at::Tensor out = causal_depthwise_conv(padded, conv_weight);
    state.conv = padded.slice(1, T, T + 3);
    q = out.slice(-1, 0, width);
    k = out.slice(-1, width, 2 * width);
    v = out.slice(-1, 2 * width, 3 * width);
  }
  auto per_head = [&](const at::Tensor& t) { return t.reshape({B, T, heads_, head_dim_}); };
  ProjectedTokens p;
  p.phi_k = features(per_head(k));
  p.phi_q = features(per_head(q));
  p.v = per_head(v);
  p.retain = gate_value(Gate::Retain, x);
  p.lr = gate_value(Gate::Lr, x);
  if (rule_.dgd_per_feature) {
    p.retain_feature = p.retain;
    p.lr_feature = p.lr;
    p.retain = p.retain_feature.mean(-1);
    p.lr = p.lr_feature.mean(-1);
  }
  p.momentum = gate_value(Gate::Momentum, x);
  p.gamma = gate_value(Gate::Gamma, x);
  p.delta = gate_value(Gate::HuberDelta, x);
  return p;
}

at::Tensor MemoryLayerImpl::features(const at::Tensor& z) const {
  at::Tensor coefficients = poly_coefficients.defined() ? poly_coefficients.to(z.dtype()) : at::Tensor();
  return apply_feature_map(z / z.norm(2, -1, true).clamp_min(1e-12), rule_.feature_map, coefficients);
}

at::Tensor MemoryLayerImpl::read(const MemoryState& state, const at::Tensor& phi) const {
  const at::Tensor z = phi.transpose(1, 2);  // [B,H,T,d_φ]
  const at::Tensor y = rule_.structure == Structure::Linear
                           ? at::matmul(z, state.memory[0].transpose(-1, -2))
                           : mlp_read(z, state.memory[0], state.memory[1]);
  return y.transpose(1, 2);
}

at::Tensor MemoryLayerImpl::forward_frozen(const at::Tensor& x, MemoryState& state) const {
  ProjectedTokens p = project(x, state);
  state.tokens += x.size(1);
  return read(state, p.phi_q);
}

at::Tensor MemoryLayerImpl::mlp_read(const at::Tensor& z, const at::Tensor& w1, const at::Tensor& w2) const {
  return mlp_pass(z, w1, w2, ln_weight.to(z.dtype()), ln_bias.to(z.dtype())).y;
}

void MemoryLayerImpl::set_live_rule(const MemoryRule& rule) {
  TORCH_CHECK(rule.structure == rule_.structure && rule.bias == rule_.bias && rule.retention == rule_.retention &&
                  rule.optimiser == rule_.optimiser && rule.window == rule_.window && rule.conv == rule_.conv &&
                  rule.feature_map == rule_.feature_map && rule.gamma == rule_.gamma &&
                  rule.dgd_per_feature == rule_.dgd_per_feature,
              "memory layer: this rule change needs a restart (it changes parameters or state shapes)");
  rule_ = rule;
  refresh_position_weights();
}

void MemoryLayerImpl::refresh_position_weights() {
  at::NoGradGuard no_grad;
  const at::Tensor w = position_weights(at::TensorOptions().dtype(at::kFloat)).contiguous();
  position_weights_float_.assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
}

}  // namespace memscope::model
