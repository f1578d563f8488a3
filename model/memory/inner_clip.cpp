#include "model/memory/inner_clip.h"

#include <ATen/ATen.h>

namespace memscope::model {

at::Tensor clip_factor(const at::Tensor& norm_sq, double clip) {
  if (clip <= 0.0) return at::ones_like(norm_sq);
  // The floor keeps g = 0 finite (factor 1) and autograd through sqrt clean.
  return at::clamp_max(clip / norm_sq.clamp_min(1e-30).sqrt(), 1.0);
}

at::Tensor clip_factor(const std::vector<at::Tensor>& grads, double clip) {
  at::Tensor norm_sq;
  for (const auto& g : grads) {
    at::Tensor part = g.pow(2).sum({-2, -1}, /*keepdim=*/true);
    norm_sq = norm_sq.defined() ? norm_sq + part : part;
  }
  return clip_factor(norm_sq, clip);
}

}  // namespace memscope::model
