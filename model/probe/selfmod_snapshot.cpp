#include "model/probe/selfmod_snapshot.h"

#include <ATen/ATen.h>

#include <algorithm>
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

bool on_host(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

// Every matrix shown is measured where it lies when all are CPU float32 and contiguous, each
// weight's of one shape (its `before` too: the ΔM scratch is sized by the first), shrunk, and their
// spectra go the batched way (a shorter side up to kSmallSingularValueSide; LAPACK's beyond).
bool measured_on_host(const LmState& state, const std::vector<std::vector<at::Tensor>>* before,
                      int64_t largest) {
  for (size_t w = 0; w < 2; ++w) {
    const at::Tensor first = weight_of(state, 0, 0, w);
    if (first.dim() != 2 ||
        shown_shape(first.size(0), first.size(1), largest) == std::make_pair(first.size(0), first.size(1)) ||
        std::min(first.size(0), first.size(1)) > kSmallSingularValueSide)
      return false;
    for (size_t l = 0; l < state.blocks.size(); ++l)
      for (int m = 0; m < kSelfModCount; ++m) {
        const at::Tensor now = weight_of(state, l, m, w);
        if (!on_host(now) || now.sizes() != first.sizes()) return false;
        if (before &&
            (!on_host(before_of(*before, l, m, w)) || before_of(*before, l, m, w).sizes() != first.sizes()))
          return false;
      }
  }
  return true;
}

std::vector<SelfModShown> shown_on_host(const LmState& state,
                                        const std::vector<std::vector<at::Tensor>>* before, int64_t largest) {
  const size_t blocks = state.blocks.size();
  std::vector<SelfModShown> out;
  std::vector<HostSnapshotMatrix> matrices;
  std::vector<float*> shown, summary;
  for (size_t w = 0; w < 2; ++w)
    for (const char* tensor : {"M", "dM"}) {
      const bool change = tensor[0] == 'd';
      if (change && !before) continue;
      const at::Tensor first = weight_of(state, 0, 0, w);
      const int64_t r = first.size(0), c = first.size(1),
                    count = static_cast<int64_t>(blocks) * kSelfModCount;
      const auto [rows, cols] = shown_shape(r, c, largest);
      SelfModShown s{static_cast<int>(w),
                     tensor,
                     r,
                     c,
                     {at::empty({count, rows, cols}, first.options()),
                      at::empty({count, std::min(r, c) + 4}, first.options())}};
      for (size_t l = 0, i = 0; l < blocks; ++l)
        for (int m = 0; m < kSelfModCount; ++m, ++i) {
          const at::Tensor now = weight_of(state, l, m, w);
          matrices.push_back({now.data_ptr<float>(),
                              change ? before_of(*before, l, m, w).data_ptr<float>() : nullptr, now.size(0),
                              now.size(1)});
          shown.push_back(s.view.shown.data_ptr<float>() + static_cast<int64_t>(i) * rows * cols);
          summary.push_back(s.view.summary.data_ptr<float>() +
                            static_cast<int64_t>(i) * (std::min(r, c) + 4));
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
  return measured_on_host(state, before, largest) ? shown_on_host(state, before, largest)
                                                  : shown_as_stacks(state, before, largest);
}

}  // namespace memscope::model
