#include "model/probe/hope_probes.h"

#include <ATen/ATen.h>

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

}  // namespace

at::Tensor hope_probe_tensor(const LanguageModel& model, const LmState& state, const StepRecords* records) {
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
