#include "model/memory/memory_state.h"

#include "model/util/errors.h"

namespace memscope::model {

namespace {

template <typename F>
MemoryState map_tensors(const MemoryState& s, F f) {
  MemoryState out = s;
  for (auto& t : out.memory) t = f(t);
  for (auto& t : out.momentum) t = f(t);
  for (auto& t : out.anchor) t = f(t);
  for (at::Tensor* t : {&out.latent, &out.ring_phi, &out.ring_v, &out.ring_gamma, &out.conv})
    if (t->defined()) *t = f(*t);
  return out;
}

}  // namespace

MemoryState MemoryState::clone() const {
  return map_tensors(*this, [](const at::Tensor& t) { return t.clone(); });
}

MemoryState MemoryState::to(const c10::Device& device) const {
  return map_tensors(*this, [&](const at::Tensor& t) { return t.to(device); });
}

MemoryState MemoryState::detached() const {
  return map_tensors(*this, [](const at::Tensor& t) { return t.detach(); });
}

at::Tensor head_mask(const std::vector<int64_t>& heads, int64_t num_heads, const at::Tensor& like) {
  at::Tensor mask = at::zeros({num_heads}, like.options());
  if (heads.empty()) return mask.fill_(1.0);
  for (int64_t h : heads) {
    if (h < 0 || h >= num_heads)
      throw UserError("head " + std::to_string(h) + " does not exist (the layer has " +
                      std::to_string(num_heads) + " heads)");
    mask[h] = 1.0;
  }
  return mask;
}

void MemoryState::reset_momentum(const std::vector<int64_t>& heads) {
  for (auto& s : momentum) {
    at::Tensor keep = 1.0 - head_mask(heads, s.size(1), s);
    auto shape = std::vector<int64_t>(s.dim(), 1);
    shape[1] = s.size(1);
    s = s * keep.view(shape);
  }
}

std::map<std::string, at::Tensor> MemoryState::to_map() const {
  std::map<std::string, at::Tensor> m;
  for (size_t i = 0; i < memory.size(); ++i) {
    m[names[i]] = memory[i];
    m["S_" + names[i]] = momentum[i];
    if (!anchor.empty()) m["anchor_" + names[i]] = anchor[i];
  }
  if (latent.defined()) m["latent"] = latent;
  m["ring_phi"] = ring_phi;
  m["ring_v"] = ring_v;
  m["ring_gamma"] = ring_gamma;
  if (conv.defined()) m["conv"] = conv;
  m["tokens"] = at::full({1}, tokens, at::TensorOptions().dtype(at::kLong));
  m["anchor_chunk"] = at::full({1}, anchor_chunk, at::TensorOptions().dtype(at::kLong));
  return m;
}

MemoryState MemoryState::from_map(const std::map<std::string, at::Tensor>& m) {
  auto need = [&](const std::string& key) -> const at::Tensor& {
    auto it = m.find(key);
    if (it == m.end()) throw UserError("memory state: tensor '" + key + "' is missing");
    return it->second;
  };
  MemoryState s;
  const bool mlp = m.count("W1") > 0;
  s.names = mlp ? std::vector<std::string>{"W1", "W2"} : std::vector<std::string>{"M"};
  for (const auto& name : s.names) {
    s.memory.push_back(need(name));
    s.momentum.push_back(need("S_" + name));
    if (m.count("anchor_" + name)) s.anchor.push_back(m.at("anchor_" + name));
  }
  if (m.count("latent")) s.latent = m.at("latent");
  s.ring_phi = need("ring_phi");
  s.ring_v = need("ring_v");
  s.ring_gamma = need("ring_gamma");
  if (m.count("conv")) s.conv = m.at("conv");
  s.tokens = need("tokens").item<int64_t>();
  s.anchor_chunk = need("anchor_chunk").item<int64_t>();
  if (s.anchor.size() != s.memory.size()) {
    s.anchor.clear();
    s.anchor_chunk = 0;
  }
  return s;
}

}  // namespace memscope::model
