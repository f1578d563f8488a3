#include "model/train/adamw.h"

#include <ATen/ATen.h>

#include <cmath>

#include "model/util/errors.h"

namespace memscope::model {

AdamW::AdamW(NamedTensors parameters, AdamWOptions options)
    : parameters_(std::move(parameters)), options_(options) {
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : parameters_) {
    exp_avg_.push_back(at::zeros_like(p));
    exp_avg_sq_.push_back(at::zeros_like(p));
  }
}

void AdamW::zero_grad() {
  for (auto& [name, p] : parameters_)
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
}

// The update as ATen's _foreach_ ops over every parameter with a gradient: on a GPU one
// multi-tensor kernel per line instead of one per parameter per line (a few kernels where there
// were a thousand, README "On a GPU machine"); on the CPU they loop over the same per-tensor ops,
// so the result is the same bits as one parameter at a time.
void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++steps_;
  const double correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_));
  const double correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(steps_));
  std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq, decayed;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& p = parameters_[i].second;
    if (!p.grad().defined()) continue;
    params.push_back(p);
    grads.push_back(p.grad());
    exp_avg.push_back(exp_avg_[i]);
    exp_avg_sq.push_back(exp_avg_sq_[i]);
    if (p.dim() >= 2) decayed.push_back(p);
  }
  if (params.empty()) return;
  if (options_.weight_decay != 0.0 && !decayed.empty())
    at::_foreach_mul_(decayed, 1.0 - lr * options_.weight_decay);
  at::_foreach_mul_(exp_avg, options_.beta1);
  at::_foreach_add_(exp_avg, grads, 1.0 - options_.beta1);
  at::_foreach_mul_(exp_avg_sq, options_.beta2);
  at::_foreach_addcmul_(exp_avg_sq, grads, grads, 1.0 - options_.beta2);
  std::vector<at::Tensor> denom = at::_foreach_sqrt(exp_avg_sq);
  at::_foreach_div_(denom, std::sqrt(correction2));
  at::_foreach_add_(denom, options_.eps);
  at::_foreach_addcdiv_(params, exp_avg, denom, -lr / correction1);
}

NamedTensors AdamW::state() const {
  NamedTensors out;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    out.emplace_back("optim/exp_avg/" + parameters_[i].first, exp_avg_[i]);
    out.emplace_back("optim/exp_avg_sq/" + parameters_[i].first, exp_avg_sq_[i]);
  }
  return out;
}

void AdamW::load_state(const std::map<std::string, at::Tensor>& tensors, int64_t steps, const std::string& where) {
  at::NoGradGuard no_grad;
  auto load = [&](const std::string& name, at::Tensor& into) {
    const auto it = tensors.find(name);
    if (it == tensors.end()) throw UserError(where + ": optimiser state '" + name + "' is missing");
    if (it->second.sizes() != into.sizes())
      throw UserError(where + ": optimiser state '" + name + "' has the wrong shape");
    into.copy_(it->second);
  };
  for (size_t i = 0; i < parameters_.size(); ++i) {
    load("optim/exp_avg/" + parameters_[i].first, exp_avg_[i]);
    load("optim/exp_avg_sq/" + parameters_[i].first, exp_avg_sq_[i]);
  }
  steps_ = steps;
}

at::Tensor gradient_norm_squared(const NamedTensors& parameters) {
  at::NoGradGuard no_grad;
  // All gradients as one vector, squared and summed in float64: four kernels for all parameters
  // together rather than three per parameter.
  std::vector<at::Tensor> flat;
  for (const auto& [name, p] : parameters)
    if (p.grad().defined()) flat.push_back(p.grad().reshape({-1}));
  if (flat.empty()) return {};
  return at::cat(flat).to(at::kDouble).pow(2).sum();
}

double gradient_norm(const NamedTensors& parameters) {
  const at::Tensor squared = gradient_norm_squared(parameters);
  return squared.defined() ? std::sqrt(squared.item<double>()) : 0.0;
}

void clip_gradients(const NamedTensors& parameters, double norm, double max_norm) {
  if (!(max_norm > 0.0 && norm > max_norm && std::isfinite(norm))) return;
  at::NoGradGuard no_grad;
  const double scale = max_norm / (norm + 1e-6);
  std::vector<at::Tensor> grads;
  for (const auto& [name, p] : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (!grads.empty()) at::_foreach_mul_(grads, scale);
}

double clip_grad_norm(const NamedTensors& parameters, double max_norm) {
  const double norm = gradient_norm(parameters);
  clip_gradients(parameters, norm, max_norm);
  return norm;
}

}  // namespace memscope::model
