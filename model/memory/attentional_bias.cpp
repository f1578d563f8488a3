#include "model/memory/attentional_bias.h"

namespace memscope::model {

namespace {
constexpr double kAbsEps = 1e-6;      // SPEC §4: |x| ≈ sqrt(x² + 1e-6)
constexpr double kSignSharpness = 10;  // SPEC §4: sign(x) ≈ tanh(10x)
}  // namespace

at::Tensor bias_loss(const at::Tensor& y, const at::Tensor& v, const MemoryRule& rule, const at::Tensor& delta) {
  switch (rule.bias) {
    case Bias::L2:
      return 0.5 * (y - v).pow(2).sum(-1);
    case Bias::Lp:
      return ((y - v).pow(2) + kAbsEps).pow(rule.lp_p / 2).sum(-1);
    case Bias::Huber: {
      // ½‖e‖² straight from Σe², and a floored norm, keep autograd finite at e = 0 (empty slots).
      at::Tensor squared = (y - v).pow(2).sum(-1);
      at::Tensor r = squared.clamp_min(1e-30).sqrt();
      return at::where(r <= delta, 0.5 * squared, delta * (r - 0.5 * delta));
    }
    case Bias::Dot:
      return -(y * v).sum(-1);
  }
  return {};
}

at::Tensor bias_grad(const at::Tensor& y, const at::Tensor& v, const MemoryRule& rule, const at::Tensor& delta) {
  switch (rule.bias) {
    case Bias::L2:
      return y - v;
    case Bias::Lp: {
      at::Tensor e = y - v;
      return rule.lp_p * at::tanh(kSignSharpness * e) * (e.pow(2) + kAbsEps).pow((rule.lp_p - 1) / 2);
    }
    case Bias::Huber: {
      at::Tensor e = y - v;
      // The floor keeps the unselected branch finite at e = 0, so autograd through where() stays clean.
      at::Tensor r = e.pow(2).sum(-1, /*keepdim=*/true).clamp_min(1e-30).sqrt();
      at::Tensor d = delta.unsqueeze(-1);
      return at::where(r <= d, e, d * e / r);
    }
    case Bias::Dot:
      return -v + 0 * y;
  }
  return {};
}

}  // namespace memscope::model
