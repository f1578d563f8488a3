#include "model/nn/block.h"

#include <cmath>

namespace memscope::model {

BlockState BlockState::detached() const {
  BlockState s;
  if (!memory.memory.empty()) s.memory = memory.detached();
  if (attention.k.defined()) s.attention = attention.detached();
  for (const auto& r : retrieval) s.retrieval.push_back(r.detach());
  if (!selfmod.weights[0].empty()) s.selfmod = selfmod.detached();
  s.cms = cms.detached();
  return s;
}

namespace {

at::Tensor scaled_randn(int64_t rows, int64_t cols) {
  return torch::randn({rows, cols}) / std::sqrt(static_cast<double>(cols));
}

}  // namespace

BlockImpl::BlockImpl(const LmConfig& config, const MemoryRule& rule) : config_(config) {
  const int64_t D = config.d_model;
  if (config.has_memory()) {
    memory = register_module(
        "memory", MemoryLayer(rule, MemoryLayerOptions{D, config.memory_heads, config.memory_head_dim}));
    norm_memory = register_module("norm_memory", RmsNorm(D));
    const int64_t width = memory->heads() * memory->head_dim();
    w_memory_out = register_parameter("w_memory_out", scaled_randn(D, width));
    if (config.block == BlockKind::Mac) {
      w_retrieve = register_parameter("w_retrieve", scaled_randn(width, D));
      w_retrieved = register_parameter("w_retrieved", scaled_randn(D, width));
    }
  }
  if (config.has_attention()) {
    AttentionOptions a;
    a.d_model = D;
    a.heads = config.attention_heads;
    a.window = config.block == BlockKind::Mac ? config.segment : config.window;
    a.segment = config.block == BlockKind::Mac ? config.segment : 0;
    a.persistent = config.persistent;
    a.rope_base = config.rope_base;
    attention = register_module("attention", SlidingWindowAttention(a));
    norm_attention = register_module("norm_attention", RmsNorm(D));
  }
  if (config.block == BlockKind::Hope) {
    // The memory rule supplies HOPE's inner lr ceiling and clip; its other axes do not apply.
    SelfModOptions o;
    o.d_model = D;
    o.max_lr = rule.max_lr;
    o.inner_clip = rule.inner_clip;
    o.conv = config.hope_conv;
    o.self_lr_scale = config.hope_self_lr_scale;
    o.shared_gates = config.hope_shared_gates;
    selfmod = register_module("selfmod", SelfModifyingMemory(o));
    norm_memory = register_module("norm_memory", RmsNorm(D));
    w_memory_out = register_parameter("w_memory_out", scaled_randn(D, D));
  }
  if (config.block == BlockKind::Mag) {
    w_gate = register_parameter("w_gate", scaled_randn(D, D));
    b_gate = register_parameter("b_gate", torch::zeros({D}));
  }
  norm_ffn = register_module("norm_ffn", RmsNorm(D));
  if (config.uses_cms()) {
    CmsOptions o;
    o.d_model = D;
    o.periods = parse_cms_periods(config.cms_periods, "model.cms.periods");
    o.variant = parse_cms_variant(config.cms_variant, "model.cms.variant");
    o.max_lr = rule.max_lr;
    o.inner_clip = rule.inner_clip;
    cms = register_module("cms", ContinuumMemory(o));
  } else {
    ffn = register_module("ffn", SwiGlu(D, std::max<int64_t>(1, static_cast<int64_t>(config.ffn_mult * D))));
  }
}

BlockState BlockImpl::initial_state(int64_t batch) const {
  BlockState s;
  if (memory) s.memory = memory->initial_state(batch);
  if (attention) s.attention = attention->empty_cache(batch);
  if (selfmod) s.selfmod = selfmod->initial_state(batch);
  if (cms) s.cms = cms->initial_state(batch);
  return s;
}

at::Tensor BlockImpl::forward(const at::Tensor& x, BlockState& state, int64_t chunk) const {
  return run(x, state, chunk, false, nullptr, StepDetail::OutputOnly);
}

at::Tensor BlockImpl::step(const at::Tensor& x_t, BlockState& state, StepRecord* record, int64_t chunk,
                           StepDetail detail) const {
  return run(x_t.unsqueeze(1), state, chunk, true, record, record ? detail : StepDetail::OutputOnly).squeeze(1);
}

at::Tensor BlockImpl::memory_out(const at::Tensor& x, BlockState& state, int64_t chunk, bool step_mode,
                                 StepRecord* record, StepDetail detail) const {
  at::Tensor y;  // [B,T,H,d_v]
  if (!config_.ttl) {
    y = memory->forward_frozen(x, state.memory);
  } else if (step_mode) {
    // No one asked for the record: the step skips its inner losses and copies (same y and state).
    StepOutput out = memory->step(x.squeeze(1), state.memory, chunk, record ? detail : StepDetail::OutputOnly);
    if (record) *record = std::move(out.record);
    y = out.y.unsqueeze(1);
  } else {
    y = memory->forward(x, state.memory, chunk).y;
  }
  return at::matmul(y.flatten(2), w_memory_out.t());
}

at::Tensor BlockImpl::run(const at::Tensor& x, BlockState& state, int64_t chunk, bool step_mode,
                          StepRecord* record, StepDetail detail) const {
  at::Tensor h = x;
  switch (config_.block) {
    case BlockKind::Lmm:
      h = h + memory_out(norm_memory->forward(h), state, chunk, step_mode, record, detail);
      break;
    case BlockKind::Mag: {
      const at::Tensor n = norm_attention->forward(h);
      const at::Tensor g = at::sigmoid(at::matmul(n, w_gate.t()) + b_gate);
      const at::Tensor a = attention->forward(n, state.attention);
      const at::Tensor m = memory_out(norm_memory->forward(h), state, chunk, step_mode, record, detail);
      h = h + g * a + (1 - g) * m;
      break;
    }
    case BlockKind::Mal:
      h = h + memory_out(norm_memory->forward(h), state, chunk, step_mode, record, detail);
      h = h + attention->forward(norm_attention->forward(h), state.attention);
      break;
    case BlockKind::Mac:
      h = run_mac(h, state, chunk, step_mode, record, detail);
      break;
    case BlockKind::Swa:
      h = h + attention->forward(norm_attention->forward(h), state.attention);
      break;
    case BlockKind::Hope: {
      const at::Tensor n = norm_memory->forward(h);
      // The chunkwise forms in step mode too, one token a call: equal to the per-token references
      // (selfmod->step, cms->step, which the memories' tests hold them to), without their inner
      // gradients by autograd, and on the CPU without gradients fused (bench/hope_bench's debugger_step).
      const at::Tensor m = selfmod->forward(n, state.selfmod, chunk);
      h = h + at::matmul(m, w_memory_out.t());
      break;
    }
  }
  const at::Tensor n = norm_ffn->forward(h);
  if (cms) {
    const at::Tensor c = cms->forward(n, state.cms);  // in step mode too (above)
    return h + (c - n);
  }
  return h + ffn->forward(n);
}

at::Tensor BlockImpl::run_mac(const at::Tensor& x, BlockState& state, int64_t chunk, bool step_mode,
                              StepRecord* record, StepDetail detail) const {
  // Segments sit at multiples of S from the stream start; a call may begin or end mid-segment.
  const int64_t S = config_.segment, T = x.size(1);
  std::vector<at::Tensor> outputs;
  for (int64_t t = 0; t < T;) {
    const int64_t position = state.attention.next;
    const int64_t length = std::min(T - t, S - position % S);
    if (position % S == 0 || state.retrieval.empty()) state.retrieval = state.memory.memory;
    const at::Tensor piece = x.narrow(1, t, length);
    const at::Tensor n = norm_attention->forward(piece);

    // Retrieved memory tokens: the segment-start memory read at this segment's own queries.
    MemoryState segment_start;
    segment_start.memory = state.retrieval;
    const at::Tensor queries = at::matmul(n, w_retrieve.t())
                                   .reshape({n.size(0), length, memory->heads(), memory->head_dim()});
    const at::Tensor retrieved = at::matmul(memory->read(segment_start, memory->features(queries)).flatten(2),
                                            w_retrieved.t());

    const at::Tensor a = attention->forward(n, state.attention, retrieved);
    const at::Tensor m = memory_out(norm_memory->forward(a), state, chunk, step_mode, record, detail);
    outputs.push_back(piece + a * at::sigmoid(m));
    t += length;
  }
  return outputs.size() == 1 ? outputs.front() : at::cat(outputs, 1);
}

}  // namespace memscope::model
