// When a cache built from weights (a stacked projection, precomputed keys) must be rebuilt: each
// weight's identity and in-place version, compared with what the cache was built from. Checked on
// every step, so it allocates nothing when nothing changed. A training step, a checkpoint load or
// .to(device) changes the key; an undefined weight keys as {null, 0}.
#pragma once
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace memscope::model {

using WeightKey = std::vector<std::pair<const void*, uint32_t>>;

// True (and `key` updated) when any of `weights` is another tensor or was written since `key`.
template <size_t N>
bool weights_changed(WeightKey& key, const std::array<const at::Tensor*, N>& weights) {
  auto key_of = [](const at::Tensor& t) {
    return t.defined() ? std::pair<const void*, uint32_t>(t.unsafeGetTensorImpl(), t._version())
                       : std::pair<const void*, uint32_t>(nullptr, 0);
  };
  bool same = key.size() == N;
  for (size_t i = 0; same && i < N; ++i) same = key[i] == key_of(*weights[i]);
  if (same) return false;
  key.clear();
  for (const at::Tensor* w : weights) key.push_back(key_of(*w));
  return true;
}

}  // namespace memscope::model
