#include "model/probe/hope_probes.h"

#include <ATen/ATen.h>

namespace memscope::model {

namespace {

bool has_errors(const LanguageModel& model, const LmState& state) {
  return model->config().block == BlockKind::Hope && !state.blocks.empty() &&
         state.blocks.front().selfmod.last_error.defined();
}

}  // namespace

at::Tensor hope_probe_tensor(const LanguageModel& model, const LmState& state) {
  std::vector<at::Tensor> parts;
  if (model->config().uses_cms())
    for (const auto& b : state.blocks)
      for (const auto& level : b.cms.levels)
        parts.push_back((level.weights[0][0].pow(2).sum() + level.weights[1][0].pow(2).sum()).sqrt().reshape({1}));
  if (has_errors(model, state))
    for (const auto& b : state.blocks) parts.push_back(b.selfmod.last_error[0]);
  if (parts.empty()) return {};
  for (auto& p : parts) p = p.detach().to(at::kFloat);
  return at::cat(parts);
}

size_t unpack_hope_probes(Frame& frame, const LanguageModel& model, const LmState& state, const float* host) {
  frame.cms_levels = 0;
  frame.cms_norm.clear();
  frame.cms_tick.clear();
  frame.selfmod_error.clear();
  size_t used = 0;
  if (model->config().uses_cms() && !state.blocks.empty()) {
    const auto& cms = model->block(0)->cms;
    frame.cms_levels = static_cast<int>(cms->levels());
    for (size_t l = 0; l < state.blocks.size(); ++l)
      for (int64_t k = 0; k < cms->levels(); ++k) {
        frame.cms_norm.push_back(host[used++]);
        // The level updated after the last token (stream position tokens − 1) when a period ended there.
        const int64_t tokens = state.blocks[l].cms.tokens;
        frame.cms_tick.push_back(tokens > 0 && cms->ticks(k, tokens - 1) ? 1.0f : 0.0f);
      }
  }
  if (has_errors(model, state))
    for (size_t i = 0; i < state.blocks.size() * 5; ++i) frame.selfmod_error.push_back(host[used++]);
  return used;
}

}  // namespace memscope::model
