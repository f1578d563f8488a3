#include "model/probe/selfmod_snapshot.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "model/probe/shown_matrices.h"
#include "model/probe/small_singular_values.h"
#include "model/util/work_share.h"

namespace memscope::model {

namespace {

// Memory m's weight w of block l, batch 0 and head 0: [r, c].
at::Tensor weight_of(const LmState& state, size_t l, int m, size_t w) {
  return state.blocks[l].selfmod.weights[static_cast<size_t>(m)][w][0][0];
}

at::Tensor before_of(const std::vector<std::vector<at::Tensor>>& before, size_t l, int m, size_t w) {
  return before[l][static_cast<size_t>(m) * 2 + w][0][0];
}

// The matrices shown, W1's M and ΔM, then W2's, each block's five (SelfModMemory order), where
// they lie: batch row 0, head 0 of each [B, H, r, c] weight is its first r·c floats. Nothing when
// one is not a contiguous CPU float32 tensor of its weight's shape (its `before` too: the ΔM
// scratch is sized by the first), or a weight is not shrunk or its spectra do not go the batched
// way (a shorter side beyond kSmallSingularValueSide): then they go as stacks. One pass, no ATen
// call: taking each as weight_of's slices, to check and then to point at, was 252 selects a frame
// (about 0.13 ms with their as_strided calls, probe_breakdown --op-times, Intel VM).
std::optional<std::vector<HostSnapshotMatrix>> matrices_on_host(
    const LmState& state, const std::vector<std::vector<at::Tensor>>* before, int64_t largest) {
  std::vector<HostSnapshotMatrix> out;
  for (size_t w = 0; w < 2; ++w) {
    const at::Tensor& first = state.blocks.front().selfmod.weights.front()[w];
    if (first.dim() != 4) return std::nullopt;
    const int64_t r = first.size(2), c = first.size(3);
    if (shown_shape(r, c, largest) == std::make_pair(r, c) || std::min(r, c) > kSmallSingularValueSide)
      return std::nullopt;
    auto where = [r, c](const at::Tensor& t) -> const float* {
      const bool on_host = t.dim() == 4 && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
                           t.is_contiguous() && t.size(2) == r && t.size(3) == c;
      return on_host ? t.data_ptr<float>() : nullptr;
    };
    for (const bool change : {false, true}) {
      if (change && !before) continue;
      for (size_t l = 0; l < state.blocks.size(); ++l)
        for (int m = 0; m < kSelfModCount; ++m) {
          const float* now = where(state.blocks[l].selfmod.weights[static_cast<size_t>(m)][w]);
          const float* was = change ? where((*before)[l][static_cast<size_t>(m) * 2 + w]) : nullptr;
          if (!now || (change && !was)) return std::nullopt;
          out.push_back({now, was, r, c});
        }
    }
  }
  return out;
}

// `matrices` as matrices_on_host gives them: a stack's worth (every block's five) at a time, M
// then (with ΔM) ΔM of each weight.
std::vector<SelfModShown> shown_on_host(const std::vector<HostSnapshotMatrix>& matrices, size_t blocks,
                                        bool with_change, int64_t largest) {
  const auto count = static_cast<int64_t>(blocks) * kSelfModCount;
  const size_t stacks_a_weight = with_change ? 2 : 1;
  std::vector<SelfModShown> out;
  std::vector<float*> shown, summary;
  for (size_t start = 0; start < matrices.size(); start += static_cast<size_t>(count)) {
    const HostSnapshotMatrix& first = matrices[start];
    const int64_t r = first.rows, c = first.cols, k = std::min(r, c);
    const auto [rows, cols] = shown_shape(r, c, largest);
    const int weight = static_cast<int>(out.size() / stacks_a_weight);
    SelfModShown s{weight,
                   first.before ? "dM" : "M",
                   r,
                   c,
                   {at::empty({count, rows, cols}, at::kFloat), at::empty({count, k + 4}, at::kFloat)}};
    for (int64_t i = 0; i < count; ++i) {
      shown.push_back(s.view.shown.data_ptr<float>() + i * rows * cols);
      summary.push_back(s.view.summary.data_ptr<float>() + i * (k + 4));
    }
    out.push_back(std::move(s));
  }
  show_host_matrices(matrices, largest, shown, summary);
  return out;
}

// Any device: the stacks, the shrunk ones' spectra in one batched call, then a stack each shared
// with a thread waiting for this one (about 80 µs a stack of ten 64×256 matrices, Intel VM).
std::vector<SelfModShown> shown_as_stacks(const LmState& state,
                                          const std::vector<std::vector<at::Tensor>>* before,
                                          int64_t largest) {
  const size_t blocks = state.blocks.size();
  std::vector<SelfModShown> out;
  std::vector<at::Tensor> full;  // W1's M and ΔM, then W2's
  for (size_t w = 0; w < 2; ++w) {
    std::vector<at::Tensor> now;
    for (size_t l = 0; l < blocks; ++l)
      for (int m = 0; m < kSelfModCount; ++m) now.push_back(weight_of(state, l, m, w));
    full.push_back(at::stack(now));
    out.push_back({static_cast<int>(w), "M", now[0].size(0), now[0].size(1), {}});
    if (!before) continue;
    // ΔM written into its stack: the differences apart, then stacked, took twice the copies.
    const at::Tensor change = at::empty_like(full.back());
    for (size_t l = 0, i = 0; l < blocks; ++l)
      for (int m = 0; m < kSelfModCount; ++m, ++i) {
        at::Tensor into = change.select(0, static_cast<int64_t>(i));
        at::sub_out(into, now[i], before_of(*before, l, m, w));
      }
    full.push_back(change);
    out.push_back({static_cast<int>(w), "dM", now[0].size(0), now[0].size(1), {}});
  }
  std::vector<at::Tensor> shrunk, sigma(full.size());
  std::vector<size_t> shrunk_at;  // their places in `full`
  for (size_t i = 0; i < full.size(); ++i) {
    if (shown_shape(full[i].size(-2), full[i].size(-1), largest) ==
        std::make_pair(full[i].size(-2), full[i].size(-1)))
      continue;
    shrunk.push_back(full[i]);
    shrunk_at.push_back(i);
  }
  const std::vector<at::Tensor> together = singular_values_together(shrunk);
  for (size_t j = 0; j < shrunk_at.size(); ++j) sigma[shrunk_at[j]] = together[j];
  for_each_shared(static_cast<int64_t>(full.size()), [&](int64_t i) {
    const at::NoGradGuard no_grad_there;  // grad mode is per thread
    const auto at = static_cast<size_t>(i);
    out[at].view = show_matrices(full[at], largest, sigma[at]);
  });
  return out;
}

}  // namespace

std::vector<SelfModShown> show_selfmod_memories(const LmState& state,
                                                const std::vector<std::vector<at::Tensor>>* before,
                                                int64_t largest) {
  const at::NoGradGuard no_grad;  // at::sub_out refuses weights that require grad under grad mode
  if (state.blocks.empty()) return {};
  if (before && before->size() != state.blocks.size()) before = nullptr;
  if (const auto matrices = matrices_on_host(state, before, largest))
    return shown_on_host(*matrices, state.blocks.size(), before != nullptr, largest);
  return shown_as_stacks(state, before, largest);
}

}  // namespace memscope::model
