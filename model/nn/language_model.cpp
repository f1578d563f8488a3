#include "model/nn/language_model.h"

#include <cmath>

#include "model/util/errors.h"

namespace memscope::model {

LmState LmState::detached() const {
  LmState s;
  s.position = position;
  for (const auto& b : blocks) s.blocks.push_back(b.detached());
  return s;
}

LanguageModelImpl::LanguageModelImpl(LmConfig config, const MemoryRule& rule)
    : config_(std::move(config)), rule_(rule) {
  if (config_.vocab < 2) throw UserError("model: vocabulary of " + std::to_string(config_.vocab) + " tokens is too small");
  if (config_.layers < 1) throw UserError("model.layers: must be at least 1");
  const int64_t D = config_.d_model;
  // N(0, 1/D): unit-norm rows, so the tied head starts with logits of order one.
  embedding = register_parameter("embedding", torch::randn({config_.vocab, D}) / std::sqrt(static_cast<double>(D)));
  for (int64_t i = 0; i < config_.layers; ++i)
    blocks_.push_back(register_module("block" + std::to_string(i), Block(config_, rule_)));
  norm_out = register_module("norm_out", RmsNorm(D));
}

LmState LanguageModelImpl::initial_state(int64_t batch) const {
  LmState s;
  for (const auto& b : blocks_) s.blocks.push_back(b->initial_state(batch));
  return s;
}

at::Tensor LanguageModelImpl::head(const at::Tensor& h) const { return at::matmul(norm_out->forward(h), embedding.t()); }

at::Tensor LanguageModelImpl::forward(const at::Tensor& tokens, LmState& state, int64_t chunk) const {
  TORCH_CHECK(tokens.dim() == 2, "language model: expected tokens [B,T], got ", tokens.sizes());
  at::Tensor h = embedding.index_select(0, tokens.flatten()).view({tokens.size(0), tokens.size(1), -1});
  for (size_t i = 0; i < blocks_.size(); ++i) h = blocks_[i]->forward(h, state.blocks[i], chunk);
  state.position += tokens.size(1);
  return head(h);
}

LmStepOutput LanguageModelImpl::step(const at::Tensor& token, LmState& state, int64_t chunk, StepDetail detail) const {
  TORCH_CHECK(token.dim() == 1, "language model: expected one token per sequence [B], got ", token.sizes());
  LmStepOutput out;
  at::Tensor h = embedding.index_select(0, token);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    StepRecord record;
    h = blocks_[i]->step(h, state.blocks[i], detail != StepDetail::OutputOnly ? &record : nullptr, chunk, detail);
    out.records.push_back(record.loss_before.defined() ? std::optional<StepRecord>(std::move(record)) : std::nullopt);
  }
  state.position += 1;
  out.logits = head(h);
  return out;
}

at::Tensor LanguageModelImpl::take_aux_loss(LmState& state) const {
  at::Tensor total;
  for (auto& b : state.blocks) {
    if (!b.selfmod.aux.defined()) continue;
    total = total.defined() ? total + b.selfmod.aux.sum() : b.selfmod.aux.sum();
    b.selfmod.aux = at::zeros_like(b.selfmod.aux).detach();
  }
  return total;
}

void LanguageModelImpl::set_live_rule(const MemoryRule& rule) {
  rule_ = rule;
  for (auto& block : blocks_) {
    if (block->memory) block->memory->set_live_rule(rule);
    // HOPE's memories take their lr ceiling and inner clip from the rule.
    if (block->selfmod) block->selfmod->set_live(rule.max_lr, rule.inner_clip);
    if (block->cms) block->cms->set_live(rule.max_lr, rule.inner_clip);
  }
}

}  // namespace memscope::model
