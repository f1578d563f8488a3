#include "model/train/adamw.h"

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

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++steps_;
  const double correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_));
  const double correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(steps_));
  for (size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor p = parameters_[i].second;
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (p.dim() >= 2 && options_.weight_decay != 0.0) p.mul_(1.0 - lr * options_.weight_decay);
    exp_avg_[i].mul_(options_.beta1).add_(g, 1.0 - options_.beta1);
    exp_avg_sq_[i].mul_(options_.beta2).addcmul_(g, g, 1.0 - options_.beta2);
    const at::Tensor denom = (exp_avg_sq_[i].sqrt() / std::sqrt(correction2)).add_(options_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / correction1);
  }
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
  std::vector<at::Tensor> squares;
  for (const auto& [name, p] : parameters)
    if (p.grad().defined()) squares.push_back(p.grad().to(at::kDouble).pow(2).sum());
  return squares.empty() ? at::Tensor() : at::stack(squares).sum();
}

double gradient_norm(const NamedTensors& parameters) {
  const at::Tensor squared = gradient_norm_squared(parameters);
  return squared.defined() ? std::sqrt(squared.item<double>()) : 0.0;
}

void clip_gradients(const NamedTensors& parameters, double norm, double max_norm) {
  if (!(max_norm > 0.0 && norm > max_norm && std::isfinite(norm))) return;
  at::NoGradGuard no_grad;
  const double scale = max_norm / (norm + 1e-6);
  for (const auto& [name, p] : parameters)
    if (p.grad().defined()) p.grad().mul_(scale);
}

double clip_grad_norm(const NamedTensors& parameters, double max_norm) {
  const double norm = gradient_norm(parameters);
  clip_gradients(parameters, norm, max_norm);
  return norm;
}

}  // namespace memscope::model
