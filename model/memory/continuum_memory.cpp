#include "model/memory/continuum_memory.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "model/memory/gate_bias.h"
#include "model/memory/inner_clip.h"
#include "model/memory/mlp_memory.h"
#include "model/memory/small_matmul.h"
#include "model/util/autocast.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

at::ScalarType state_dtype(const CmsState& state) {
  return state.levels.front().weights.front().scalar_type();
}

}  // namespace

const char* to_string(CmsVariant v) {
  switch (v) {
    case CmsVariant::Sequential: return "sequential";
    case CmsVariant::Independent: return "independent";
    case CmsVariant::Nested: return "nested";
  }
  return "?";
}

CmsVariant parse_cms_variant(const std::string& text, const std::string& key) {
  for (CmsVariant v : {CmsVariant::Sequential, CmsVariant::Independent, CmsVariant::Nested})
    if (text == to_string(v)) return v;
  throw UserError(key + ": '" + text + "' is not one of sequential, independent, nested");
}

std::vector<int64_t> parse_cms_periods(const std::string& text, const std::string& key) {
  std::vector<int64_t> periods;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    const auto first = part.find_first_not_of(" \t"), last = part.find_last_not_of(" \t");
    const std::string word = first == std::string::npos ? "" : part.substr(first, last - first + 1);
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (word.empty() || used != word.size() || value < 1 || value > (1 << 20))
      throw UserError(key + ": '" + text + "' is not a comma-separated list of periods in [1, 1048576]");
    periods.push_back(value);
  }
  if (periods.empty() || periods.size() > 8)
    throw UserError(key + ": needs 1 to 8 levels, got '" + text + "'");
  return periods;
}

namespace {

template <typename F>
CmsState map_tensors(const CmsState& s, F f) {
  CmsState out = s;
  for (auto& level : out.levels) {
    for (auto& t : level.weights) t = f(t);
    for (auto& t : level.accumulated) t = f(t);
  }
  return out;
}

}  // namespace

CmsState CmsState::clone() const {
  return map_tensors(*this, [](const at::Tensor& t) { return t.clone(); });
}

CmsState CmsState::detached() const {
  return map_tensors(*this, [](const at::Tensor& t) { return t.detach(); });
}

ContinuumMemoryImpl::ContinuumMemoryImpl(CmsOptions options) : options_(std::move(options)) {
  const int64_t D = options_.d_model, hidden = 4 * D;
  if (D < 1) throw UserError("cms: d_model must be positive");
  if (options_.periods.empty()) throw UserError("cms: needs at least one level");
  for (int64_t c : options_.periods)
    if (c < 1) throw UserError("cms: every period must be at least 1, got " + std::to_string(c));
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t l = 0; l < levels(); ++l) {
    const std::string p = "level" + std::to_string(l) + "_";
    w_k.push_back(register_parameter(p + "w_k", torch::randn({D, D}) * scale));
    w_v.push_back(register_parameter(p + "w_v", torch::randn({D, D}) * scale));
    w1_0.push_back(register_parameter(p + "w1_0", torch::randn({1, D, hidden}) / std::sqrt(static_cast<double>(hidden))));
    w2_0.push_back(register_parameter(p + "w2_0", torch::randn({1, hidden, D}) * scale));
    ln_weight.push_back(register_parameter(p + "ln_weight", torch::ones({1, D})));
    ln_bias.push_back(register_parameter(p + "ln_bias", torch::zeros({1, D})));
    lr_w.push_back(register_parameter(p + "lr_w", torch::randn({D}) * scale));
    lr_b.push_back(register_parameter(p + "lr_b", torch::full({1}, gate_bias::kLr)));
  }
}

CmsState ContinuumMemoryImpl::initial_state(int64_t batch) const {
  CmsState s;
  for (int64_t l = 0; l < levels(); ++l) {
    CmsLevelState level;
    for (const auto& w0 : {w1_0[static_cast<size_t>(l)], w2_0[static_cast<size_t>(l)]}) {
      auto sizes = w0.sizes().vec();
      sizes.insert(sizes.begin(), batch);
      level.weights.push_back(w0.unsqueeze(0).expand(sizes).clone());
      level.accumulated.push_back(at::zeros(sizes, w0.options()));
    }
    level.accumulated_zero = true;
    s.levels.push_back(std::move(level));
  }
  return s;
}

// One token, written plainly: the gradient of the token's own loss by autograd on the weights.
at::Tensor ContinuumMemoryImpl::level_step(int64_t level, const at::Tensor& z_t, CmsLevelState& s, bool update) const {
  const auto l = static_cast<size_t>(level);
  const at::Tensor z = z_t.unsqueeze(1).unsqueeze(2);  // [B,1,1,D]
  const at::Tensor ln_w = ln_weight[l].to(z.dtype()), ln_b = ln_bias[l].to(z.dtype());
  const at::Tensor y = mlp_pass(z, s.weights[0], s.weights[1], ln_w, ln_b).y;
  const at::Tensor k = at::matmul(z, w_k[l].t()), v = at::matmul(z, w_v[l].t());
  const at::Tensor eta = options_.max_lr * at::sigmoid(at::matmul(z_t, lr_w[l]) + lr_b[l]);  // [B]

  const bool differentiable = at::GradMode::is_enabled() &&
                              (s.weights[0].requires_grad() || s.weights[1].requires_grad() || k.requires_grad());
  std::vector<at::Tensor> g;
  {
    at::AutoGradMode grad_on(true);
    const std::vector<at::Tensor> leaves = inner_gradient_inputs(s.weights, differentiable);
    const at::Tensor key = differentiable ? k : k.detach();
    const at::Tensor value = differentiable ? v : v.detach();
    const at::Tensor out = mlp_pass(key, leaves[0], leaves[1], ln_w, ln_b).y;
    // Summed over the batch: each sequence's loss touches only its own weights.
    const at::Tensor loss = 0.5 * (out - value).pow(2).sum() / static_cast<double>(out.size(-1));
    g = torch::autograd::grad({loss}, leaves, {}, /*retain_graph=*/differentiable, /*create_graph=*/differentiable);
    if (!differentiable)
      for (auto& t : g) t = t.detach();
  }
  const at::Tensor factor = clip_factor(g, options_.inner_clip);  // [B,1,1,1]
  const at::Tensor weight = factor * eta.view({-1, 1, 1, 1});
  for (size_t i = 0; i < g.size(); ++i) s.accumulated[i] = s.accumulated[i] + weight * g[i];
  if (update) {
    for (size_t i = 0; i < g.size(); ++i) {
      s.weights[i] = s.weights[i] - s.accumulated[i];
      s.accumulated[i] = at::zeros_like(s.accumulated[i]);
    }
  }
  s.accumulated_zero = update;
  return y.squeeze(2).squeeze(1);
}

// A stretch inside one period reads one W, so its n reads are one batched pass and its n
// gradients are analytic and rank one: g1_t = δo_t a_tᵀ, g2_t = δh_t k_tᵀ.
// Both are rank one, so ‖g_t‖² = ‖δo_t‖²‖a_t‖² + ‖δh_t‖²‖k_t‖² without materialising g_t.
at::Tensor ContinuumMemoryImpl::level_stretch(int64_t level, const at::Tensor& z_in, CmsLevelState& s,
                                              bool update) const {
  if (fused_level_step_applies(level, z_in, s)) return fused_level_step(level, z_in, s, update);
  const auto l = static_cast<size_t>(level);
  const at::Tensor z = z_in.unsqueeze(1);  // [B,1,n,D]
  const at::Tensor ln_w = ln_weight[l].to(z.dtype()), ln_b = ln_bias[l].to(z.dtype());
  // The stretch's n tokens are the rows of one product with the shared W ([B,1,n,D] × [B,1,D,4D]):
  // batched_matmul.h's loop on the CPU, at::matmul elsewhere. Each token had been a 1-row product
  // of its own ([B,1,n,1,D] against [B,1,1,D,4D]), which small_matmul takes as a broadcast multiply
  // and sum through [B,1,n,D,4D] temporaries: a tenth of HOPE's training step. That form dated from
  // an inner gradient by autograd, whose float32 double backward through bmm LibTorch 1.13 got
  // wrong; the gradient below is analytic, the outer backward a plain one, and "cms: float32 outer
  // gradients ..." holds both routes to float64.
  const at::Tensor k = at::matmul(z, w_k[l].t()), v = at::matmul(z, w_v[l].t());
  const at::Tensor eta = options_.max_lr * at::sigmoid(at::matmul(z, lr_w[l]) + lr_b[l]);  // [B,1,n]
  // The read at z and the inner loss's pass at k read the same W: one pass over both sets of rows.
  const int64_t n = z.size(2);
  const MlpPass both = mlp_pass(at::cat({z, k}, 2), s.weights[0], s.weights[1], ln_w, ln_b);
  const at::Tensor y = both.y.narrow(2, 0, n);  // [B,1,n,D]

  // The per-token inner gradients analytically (mlp_inner_gradient): with grad mode on, autograd
  // takes the outer gradient through them with a plain backward, where the autograd::grad form
  // needed create_graph and a double backward per stretch.
  const MlpPass pass = pass_rows(both, n, n);
  const MlpInnerGradient inner = mlp_inner_gradient(pass, v, s.weights[0], ln_w);
  const at::Tensor &d_h = inner.delta_h, &d_o = inner.delta_o, &a = pass.a, &key = k;
  const at::Tensor norm_sq = d_o.pow(2).sum(-1) * a.pow(2).sum(-1) + d_h.pow(2).sum(-1) * key.pow(2).sum(-1);
  const at::Tensor weight = (clip_factor(norm_sq, options_.inner_clip) * eta).unsqueeze(-1);  // [B,1,n,1]
  // Σ_t w_t δo_t a_tᵀ and Σ_t w_t δh_t k_tᵀ, one GEMM each over the stretch's tokens. They were
  // broadcast products summed over the tokens ([B,1,n,4D,D] temporaries, a tenth of HOPE's
  // training step) while the outer gradient went through a double backward, whose float32 GEMM
  // form LibTorch 1.13 got wrong; with the analytic inner gradient it is a plain backward, and
  // "cms: float32 outer gradients ..." holds the GEMM form to float64.
  // The sign goes on the small factor, so that W's update is an add, whose backward copies nothing.
  auto outer_sum = [](const at::Tensor& u, const at::Tensor& w) {
    return small_matmul(u.transpose(-1, -2), w);
  };
  const at::Tensor minus_weight = -weight;
  const std::vector<at::Tensor> step{outer_sum(d_o * minus_weight, a), outer_sum(d_h * minus_weight, key)};
  if (update && s.accumulated_zero) {
    // The period's whole sum is this stretch's: W ← W − Σ_t w_t g_t, and G stays zero. The same
    // values as the general form's W − (0 + Σ) (a signed zero aside).
    for (size_t i = 0; i < 2; ++i) s.weights[i] = s.weights[i] + step[i];
    return y.squeeze(1);
  }
  for (size_t i = 0; i < 2; ++i) s.accumulated[i] = s.accumulated[i] - step[i];
  if (update) {
    for (size_t i = 0; i < 2; ++i) {
      s.weights[i] = s.weights[i] - s.accumulated[i];
      s.accumulated[i] = at::zeros_like(s.accumulated[i]);
    }
  }
  s.accumulated_zero = update;
  return y.squeeze(1);
}

at::Tensor ContinuumMemoryImpl::level_forward(int64_t level, const at::Tensor& z, CmsLevelState& s, int64_t start,
                                              CmsTrace* trace) const {
  const int64_t period = options_.periods[static_cast<size_t>(level)], T = z.size(1);
  std::vector<at::Tensor> outputs, after1, after2, tick_marks;
  for (int64_t t = 0; t < T;) {
    // Stretches end where a period ends, counted from the stream start (seed 004 change 5).
    const int64_t position = start + t;
    const int64_t n = std::min(T - t, period - position % period);
    const bool update = ticks(level, position + n - 1);
    const std::vector<at::Tensor> before = s.weights;
    outputs.push_back(level_stretch(level, z.narrow(1, t, n), s, update));
    if (trace) {
      // Weights after each token: the stretch's W, and the new W after its last token.
      // (The weights' axis 1 is the single "head", size 1, so it doubles as the token axis.)
      auto after = [&](size_t i) {
        const at::Tensor& w = before[i];
        return at::cat({w.expand({w.size(0), n - 1, w.size(2), w.size(3)}), s.weights[i]}, 1);
      };
      after1.push_back(after(0));
      after2.push_back(after(1));
      at::Tensor tick = at::zeros({n}, z.options());
      if (update) tick[n - 1] = 1.0;
      tick_marks.push_back(tick);
    }
    t += n;
  }
  if (trace) {
    trace->weights.push_back({at::cat(after1, 1), at::cat(after2, 1)});
    trace->tick.push_back(at::cat(tick_marks, 0));
  }
  return outputs.size() == 1 ? outputs.front() : at::cat(outputs, 1);
}

at::Tensor ContinuumMemoryImpl::step(const at::Tensor& input, CmsState& state) const {
  TORCH_CHECK(input.dim() == 2 && input.size(1) == options_.d_model, "cms step: expected x_t of shape [B,",
              options_.d_model, "], got ", input.sizes());
  const AutocastOff state_precision(input.device().type());  // as forward
  const at::Tensor x_t = state_precision.was_on() ? input.to(state_dtype(state)) : input;
  at::Tensor h = x_t, sum = x_t;
  for (int64_t l = 0; l < levels(); ++l) {
    const bool update = ticks(l, state.tokens);
    if (options_.variant == CmsVariant::Independent) {
      sum = sum + level_step(l, x_t, state.levels[static_cast<size_t>(l)], update) - x_t;
    } else {
      h = level_step(l, h, state.levels[static_cast<size_t>(l)], update);
    }
  }
  apply_resets(state, state.tokens, nullptr);
  state.tokens += 1;
  return options_.variant == CmsVariant::Independent ? sum : h;
}

void ContinuumMemoryImpl::apply_resets(CmsState& state, int64_t position, CmsTrace* trace) const {
  for (int64_t l = levels() - 2; l >= 0; --l) {
    if (!resets(l, position)) continue;
    CmsLevelState& fast = state.levels[static_cast<size_t>(l)];
    fast.weights = state.levels[static_cast<size_t>(l + 1)].weights;  // never modified in place
    for (auto& g : fast.accumulated) g = at::zeros_like(g);
    fast.accumulated_zero = true;
    if (trace) {
      for (size_t i = 0; i < 2; ++i) {
        at::Tensor& w = trace->weights[static_cast<size_t>(l)][i];  // [B,n,…]: the last token's weights change
        w = at::cat({w.narrow(1, 0, w.size(1) - 1), fast.weights[i]}, 1);
      }
    }
  }
}

at::Tensor ContinuumMemoryImpl::chain_forward(const at::Tensor& x, CmsState& state, CmsTrace* trace) const {
  const int64_t T = x.size(1);
  if (options_.variant != CmsVariant::Nested) {
    at::Tensor h = x;
    for (int64_t l = 0; l < levels(); ++l) h = level_forward(l, h, state.levels[static_cast<size_t>(l)], state.tokens, trace);
    state.tokens += T;
    return h;
  }
  std::vector<at::Tensor> outputs;
  std::vector<CmsTrace> parts;
  for (int64_t t = 0; t < T;) {
    // The stretch ends at the next update of any level above the first (a reset), or at the call's end.
    int64_t n = T - t;
    for (int64_t l = 1; l < levels(); ++l) {
      const int64_t period = options_.periods[static_cast<size_t>(l)];
      n = std::min(n, period - state.tokens % period);
    }
    CmsTrace part;
    at::Tensor h = x.narrow(1, t, n);
    for (int64_t l = 0; l < levels(); ++l)
      h = level_forward(l, h, state.levels[static_cast<size_t>(l)], state.tokens, trace ? &part : nullptr);
    state.tokens += n;
    apply_resets(state, state.tokens - 1, trace ? &part : nullptr);
    outputs.push_back(h);
    if (trace) parts.push_back(std::move(part));
    t += n;
  }
  if (trace) {
    for (int64_t l = 0; l < levels(); ++l) {
      const auto level = static_cast<size_t>(l);
      std::vector<at::Tensor> w1, w2, tick;
      for (const auto& p : parts) {
        w1.push_back(p.weights[level][0]);
        w2.push_back(p.weights[level][1]);
        tick.push_back(p.tick[level]);
      }
      trace->weights.push_back({at::cat(w1, 1), at::cat(w2, 1)});
      trace->tick.push_back(at::cat(tick, 0));
    }
  }
  return outputs.size() == 1 ? outputs.front() : at::cat(outputs, 1);
}

at::Tensor ContinuumMemoryImpl::forward(const at::Tensor& input, CmsState& state, CmsTrace* trace) const {
  TORCH_CHECK(input.dim() == 3 && input.size(2) == options_.d_model, "cms forward: expected x of shape [B,T,",
              options_.d_model, "], got ", input.sizes());
  // train.bf16_autocast: a level's read is a product with its memory, and its write goes into it, so
  // the levels run in the state's float32, as MemoryLayerImpl::forward keeps its recurrence.
  const AutocastOff state_precision(input.device().type());
  const at::Tensor x = state_precision.was_on() ? input.to(state_dtype(state)) : input;
  if (options_.variant != CmsVariant::Independent) return chain_forward(x, state, trace);
  at::Tensor sum = x;
  for (int64_t l = 0; l < levels(); ++l)
    sum = sum + level_forward(l, x, state.levels[static_cast<size_t>(l)], state.tokens, trace) - x;
  state.tokens += x.size(1);
  return sum;
}

}  // namespace memscope::model
