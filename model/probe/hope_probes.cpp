#include "model/probe/hope_probes.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "model/util/sum_of_squares.h"

namespace memscope::model {

namespace {

// Hope blocks that have written at least once (train frames of a fresh state have not).
bool has_selfmod(const LanguageModel& model, const LmState& state) {
  return model->config().block == BlockKind::Hope && !state.blocks.empty() &&
         state.blocks.front().selfmod.last_error.defined();
}

// Memory layers with per-feature dgd whose step records are all there (inspect frames).
bool has_feature_records(const LanguageModel& model, const StepRecords* records) {
  if (!records || !model->config().has_memory() || !model->rule().dgd_per_feature) return false;
  if (static_cast<int64_t>(records->size()) != model->layers()) return false;
  for (const auto& r : *records)
    if (!r || !r->retain_feature.defined()) return false;
  return true;
}

bool cpu_float(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat;
}

// Batch row 0 of a [B, …] float tensor: the first numel / B values of its contiguous copy (the
// tensor itself when it is contiguous, as it is after a step: no ATen call).
struct Row0 {
  at::Tensor whole;
  explicit Row0(const at::Tensor& t) : whole(t.contiguous()) {}
  const float* data() const { return whole.data_ptr<float>(); }
  int64_t size() const { return whole.size(0) == 0 ? 0 : whole.numel() / whole.size(0); }
};

// hope_probe_tensor on the CPU in float32: the same values summed on the host, then one tensor.
// As ATen calls, the CMS norms' squares and sums and the selfmod rows took about 140 µs of a
// demo-mqar-hope token's 150 µs of probes (Intel VM, bench/probe_breakdown --op-times), a third
// of its step.
std::optional<at::Tensor> hope_probe_tensor_on_host(const LanguageModel& model, const LmState& state,
                                                    const StepRecords* records) {
  std::vector<const at::Tensor*> read;
  const bool cms = model->config().uses_cms(), selfmod = has_selfmod(model, state);
  const bool features = !selfmod && has_feature_records(model, records);
  for (const auto& b : state.blocks) {
    if (cms)
      for (const auto& level : b.cms.levels)
        for (const auto& w : level.weights) read.push_back(&w);
    if (selfmod)
      for (const at::Tensor* t :
           {&b.selfmod.last_error, &b.selfmod.last_precond, &b.selfmod.last_retain, &b.selfmod.last_lr})
        read.push_back(t);
  }
  if (features)
    for (const auto& r : *records)
      for (const at::Tensor* t : {&r->retain_feature, &r->lr_feature}) read.push_back(t);
  for (const at::Tensor* t : read)
    if (!cpu_float(*t)) return std::nullopt;
  std::vector<float> out;
  auto append = [&out](const Row0& r) { out.insert(out.end(), r.data(), r.data() + r.size()); };
  if (cms)
    for (const auto& b : state.blocks)
      for (const auto& level : b.cms.levels) {
        const Row0 w1(level.weights[0]), w2(level.weights[1]);
        out.push_back(static_cast<float>(
            std::sqrt(squares_of(w1.data(), w1.size()) + squares_of(w2.data(), w2.size()))));
      }
  if (selfmod) {
    for (const auto& b : state.blocks) append(Row0(b.selfmod.last_error));
    for (const auto& b : state.blocks) {
      // The preconditioner is diagonal: its eigenvalues are its entries.
      // A NaN entry makes both NaN, as ATen's min and max.
      const Row0 p(b.selfmod.last_precond);
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (int64_t i = 0; i < p.size(); ++i) {
        const float x = p.data()[i];
        lo = std::isnan(x) || std::isnan(lo) ? std::numeric_limits<float>::quiet_NaN() : std::min(lo, x);
        hi = std::isnan(x) || std::isnan(hi) ? std::numeric_limits<float>::quiet_NaN() : std::max(hi, x);
      }
      out.push_back(lo);
      out.push_back(hi);
    }
    for (const auto& b : state.blocks) append(Row0(b.selfmod.last_retain));
    for (const auto& b : state.blocks) append(Row0(b.selfmod.last_lr));
  } else if (features) {
    for (const auto& r : *records) append(Row0(r->retain_feature));
    for (const auto& r : *records) append(Row0(r->lr_feature));
  }
  if (out.empty()) return at::Tensor();
  return at::tensor(out);
}

}  // namespace

at::Tensor hope_probe_tensor(const LanguageModel& model, const LmState& state, const StepRecords* records) {
  if (auto on_host = hope_probe_tensor_on_host(model, state, records)) return *on_host;
  std::vector<at::Tensor> parts;
  if (model->config().uses_cms())
    for (const auto& b : state.blocks)
      for (const auto& level : b.cms.levels)
        parts.push_back((level.weights[0][0].pow(2).sum() + level.weights[1][0].pow(2).sum()).sqrt().reshape({1}));
  if (has_selfmod(model, state)) {
    for (const auto& b : state.blocks) parts.push_back(b.selfmod.last_error[0]);
    // The preconditioner is diagonal: its eigenvalues are its entries.
    for (const auto& b : state.blocks)
      parts.push_back(at::stack({b.selfmod.last_precond[0].min(), b.selfmod.last_precond[0].max()}));
    for (const auto& b : state.blocks) parts.push_back(b.selfmod.last_retain[0]);
    for (const auto& b : state.blocks) parts.push_back(b.selfmod.last_lr[0]);
  } else if (has_feature_records(model, records)) {
    for (const auto& r : *records) parts.push_back(r->retain_feature[0].flatten());
    for (const auto& r : *records) parts.push_back(r->lr_feature[0].flatten());
  }
  if (parts.empty()) return {};
  for (auto& p : parts) p = p.detach().to(at::kFloat);
  return at::cat(parts);
}

size_t unpack_hope_probes(Frame& frame, const LanguageModel& model, const LmState& state, const StepRecords* records,
                          const float* host) {
  frame.cms_levels = 0;
  frame.cms_norm.clear();
  frame.cms_tick.clear();
  frame.selfmod_error.clear();
  frame.selfmod_retention.clear();
  frame.feature_rows = 0;
  frame.feature_dim = 0;
  frame.retain_feature.clear();
  frame.lr_feature.clear();
  size_t used = 0;
  auto take = [&](std::vector<float>& out, size_t n) {
    out.assign(host + used, host + used + n);
    used += n;
  };
  const size_t layers = state.blocks.size();
  if (model->config().uses_cms() && layers > 0) {
    const auto& cms = model->block(0)->cms;
    frame.cms_levels = static_cast<int>(cms->levels());
    take(frame.cms_norm, layers * static_cast<size_t>(cms->levels()));
    for (size_t l = 0; l < layers; ++l)
      for (int64_t k = 0; k < cms->levels(); ++k) {
        // The level updated after the last token (stream position tokens − 1) when a period ended there.
        const int64_t tokens = state.blocks[l].cms.tokens;
        frame.cms_tick.push_back(tokens > 0 && cms->ticks(k, tokens - 1) ? 1.0f : 0.0f);
      }
  }
  if (has_selfmod(model, state)) {
    take(frame.selfmod_error, layers * 5);
    take(frame.selfmod_retention, layers * 2);
    frame.feature_rows = 1;
    frame.feature_dim = static_cast<int>(state.blocks.front().selfmod.last_retain.size(-1));
  } else if (has_feature_records(model, records)) {
    const at::Tensor& r = (*records)[0]->retain_feature;  // [B,H,d_φ]
    frame.feature_rows = static_cast<int>(r.size(1));
    frame.feature_dim = static_cast<int>(r.size(2));
  }
  const size_t features = layers * static_cast<size_t>(frame.feature_rows * frame.feature_dim);
  take(frame.retain_feature, features);
  take(frame.lr_feature, features);
  return used;
}

}  // namespace memscope::model
