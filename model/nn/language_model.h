// The language model memscope steps and trains: a token embedding, N blocks and a final RMSNorm,
// with the head tied to the embedding (logits = n(h) Eᵀ).
//
// forward(tokens) is the training path (chunkwise memory); step(token) is the debugger's path
// (one token at a time, one probe record per memory layer: the memory layer's sequential step;
// HOPE's memories run their chunkwise forms one token a call, fused on the CPU). They share every
// parameter, and their logits agree to float tolerance (tests/model/test_language_model.cpp).
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <vector>

#include "model/nn/block.h"
#include "model/nn/lm_config.h"

namespace memscope::model {

struct LmState {
  std::vector<BlockState> blocks;
  int64_t position = 0;  // tokens since the start of the stream

  // The same state cut from autograd: truncated BPTT carries it into the next segment.
  LmState detached() const;
};

struct LmStepOutput {
  at::Tensor logits;                            // [B,V]
  std::vector<std::optional<StepRecord>> records;  // per layer; empty where there is no memory write
};

class LanguageModelImpl : public torch::nn::Module {
 public:
  LanguageModelImpl(LmConfig config, const MemoryRule& rule);

  const LmConfig& config() const { return config_; }
  const MemoryRule& rule() const { return rule_; }
  int64_t layers() const { return static_cast<int64_t>(blocks_.size()); }
  Block& block(int64_t i) { return blocks_.at(static_cast<size_t>(i)); }
  const Block& block(int64_t i) const { return blocks_.at(static_cast<size_t>(i)); }

  // HOPE's auxiliary retrieval loss (seed 004 change 1) summed over the hope blocks and the
  // tokens since the last call, then reset to zero in `state`; undefined when no block has one.
  at::Tensor take_aux_loss(LmState& state) const;

  // Applies a rule that differs from rule() only in live knobs to every memory layer.
  void set_live_rule(const MemoryRule& rule);

  // A fresh stream for `batch` sequences: memories at M_0, empty attention caches.
  LmState initial_state(int64_t batch) const;

  // tokens: [B,T] int64 → logits [B,T,V]; the memories run their chunkwise form with chunk b.
  at::Tensor forward(const at::Tensor& tokens, LmState& state, int64_t chunk) const;

  // token: [B] int64 → logits [B,V] and what each layer's memory did. chunk b > 1 steps the
  // training form token by token: T calls equal forward(tokens, state, b) (the step into a
  // training step); the default 1 is the exact sequential step.
  // StepDetail::OutputOnly (an unprobed step) leaves `records` empty: the same logits and state,
  // without the inner losses the probes read.
  LmStepOutput step(const at::Tensor& token, LmState& state, int64_t chunk = 1,
                    StepDetail detail = StepDetail::Record) const;

  at::Tensor embedding;  // [V,D], also the output head
  RmsNorm norm_out{nullptr};

 private:
  at::Tensor head(const at::Tensor& h) const;

  LmConfig config_;
  MemoryRule rule_;
  std::vector<Block> blocks_;
};
TORCH_MODULE(LanguageModel);

}  // namespace memscope::model
