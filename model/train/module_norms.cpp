#include "model/train/module_norms.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>

namespace memscope::model {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string memory_module(const std::string& p) {  // p: the MemoryLayer's own parameter name
  if (p == "w_q") return "W_Q";
  if (p == "conv_weight") return "conv";
  if (p == "w_k") return "W_K";
  if (p == "w_v") return "W_V";
  if (starts_with(p, "gate_")) return "gate." + p.substr(5, p.size() - 7);  // gate_{name}_{w|b}
  if (p == "m0" || p == "w1_0" || p == "w2_0") return "M0";
  if (p == "conv_weight") return "conv";
  if (p == "poly_coefficients") return "feature_map";
  if (p == "ln_weight" || p == "ln_bias") return "LN";
  return p;
}

std::string selfmod_module(const std::string& p) {  // M_{k,v,eta,alpha,memory}_{w1_0,w2_0,ln_*}, w_q, b_*, conv_weight
  if (p == "w_q") return "W_Q";
  if (p == "conv_weight") return "conv";
  if (starts_with(p, "b_")) return "gates";
  if (p.find("ln_") != std::string::npos) return "LN";
  return "M0";
}

}  // namespace

std::string module_of(const std::string& parameter) {
  if (parameter == "embedding") return "embedding";
  if (starts_with(parameter, "norm_out")) return "head.norm";
  if (!starts_with(parameter, "block")) return parameter;
  const size_t dot = parameter.find('.');
  if (dot == std::string::npos) return parameter;
  const std::string layer = "layer" + parameter.substr(5, dot - 5) + "/";
  const std::string rest = parameter.substr(dot + 1);
  const size_t sub = rest.find('.');
  const std::string head = rest.substr(0, sub), tail = sub == std::string::npos ? "" : rest.substr(sub + 1);
  if (head == "memory") return layer + "memory." + memory_module(tail);
  if (head == "selfmod") return layer + "selfmod." + selfmod_module(tail);
  if (head == "attention" || head == "ffn" || head == "cms") return layer + head;
  return layer + "mixing";
}

std::vector<ModuleNorm> module_gradient_norms(const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                              std::vector<at::Tensor>* before, double* total_norm) {
  at::NoGradGuard no_grad;
  std::vector<ModuleNorm> modules;
  std::map<std::string, size_t> index;
  // ‖g‖² per parameter with a gradient, in parameter order (as gradient_norm sums them), and the
  // module each belongs to; one host transfer brings them and their total.
  std::vector<at::Tensor> squares;
  std::vector<size_t> module_of_square;
  for (const auto& [name, p] : parameters) {
    const std::string module = module_of(name);
    auto it = index.find(module);
    if (it == index.end()) {
      it = index.emplace(module, modules.size()).first;
      modules.push_back({module, 0.0, 0.0});
    }
    if (p.grad().defined()) {
      squares.push_back(p.grad().to(at::kDouble).pow(2).sum());
      module_of_square.push_back(it->second);
    }
    if (before) before->push_back(p.detach().clone());
  }
  if (total_norm) *total_norm = 0.0;
  if (squares.empty()) return modules;
  const at::Tensor stacked = at::stack(squares);
  const at::Tensor host = at::cat({stacked, stacked.sum().unsqueeze(0)}).cpu();
  const double* values = host.data_ptr<double>();
  std::vector<double> sums(modules.size(), 0.0);
  for (size_t i = 0; i < squares.size(); ++i) sums[module_of_square[i]] += values[i];
  for (size_t m = 0; m < modules.size(); ++m) modules[m].grad_norm = std::sqrt(sums[m]);
  if (total_norm) *total_norm = std::sqrt(values[squares.size()]);
  return modules;
}

void module_update_ratios(std::vector<ModuleNorm>& modules,
                          const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                          const std::vector<at::Tensor>& before) {
  at::NoGradGuard no_grad;
  if (before.empty() || before.size() != parameters.size()) return;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < modules.size(); ++i) index[modules[i].name] = i;
  // Per module ‖Δθ‖² and ‖θ‖², summed on the device and brought to the host in one transfer.
  std::vector<at::Tensor> moved(modules.size()), size(modules.size());
  for (size_t i = 0; i < modules.size(); ++i) moved[i] = size[i] = at::zeros({}, before.front().options().dtype(at::kDouble));
  for (size_t i = 0; i < parameters.size(); ++i) {
    const auto it = index.find(module_of(parameters[i].first));
    if (it == index.end()) continue;
    const at::Tensor old = before[i].to(at::kDouble), now = parameters[i].second.detach().to(at::kDouble);
    moved[it->second] = moved[it->second] + (now - old).pow(2).sum();
    size[it->second] = size[it->second] + old.pow(2).sum();
  }
  const at::Tensor host = at::stack({at::stack(moved), at::stack(size)}).sqrt().cpu();
  for (size_t i = 0; i < modules.size(); ++i) {
    const double weight = host[1][static_cast<int64_t>(i)].item<double>();
    modules[i].update_ratio = weight > 0 ? host[0][static_cast<int64_t>(i)].item<double>() / weight : 0.0;
  }
}

const ModuleNorm* largest_gradient(const std::vector<ModuleNorm>& modules) {
  const ModuleNorm* best = nullptr;
  for (const auto& m : modules)
    if (!best || m.grad_norm > best->grad_norm || (std::isnan(m.grad_norm) && !std::isnan(best->grad_norm))) best = &m;
  return best;
}

}  // namespace memscope::model
