#include "model/nn/graphed_step.h"

#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/util/cuda_graph.h"

namespace memscope::model {

namespace {

// Every tensor of a state that a step of a graphable model reads or replaces, in a fixed order
// (applies() leaves out the blocks with other state: MAC's retrieval, HOPE's, the CMS's).
template <class State>
auto tensors_of(State& s) {
  std::vector<decltype(&s.blocks.front().memory.latent)> out;
  for (auto& b : s.blocks) {
    auto& m = b.memory;
    for (auto& t : m.memory) out.push_back(&t);
    for (auto& t : m.momentum) out.push_back(&t);
    for (auto& t : m.anchor) out.push_back(&t);
    for (auto* t : {&m.latent, &m.ring_phi, &m.ring_v, &m.ring_gamma, &m.conv}) out.push_back(t);
    for (auto* t : {&b.attention.k, &b.attention.v, &b.attention.positions}) out.push_back(t);
  }
  return out;
}

// Whether `state` and `buffers` have the same layout of tensors (the same ones defined) and every
// defined pair satisfies `same`.
template <class Same>
bool pairwise(const LmState& state, const LmState& buffers, Same same) {
  if (state.blocks.size() != buffers.blocks.size()) return false;
  const auto a = tensors_of(state), b = tensors_of(buffers);
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i]->defined() != b[i]->defined()) return false;
    if (a[i]->defined() && !same(*a[i], *b[i])) return false;
  }
  return true;
}

// Whether `state` holds exactly the tensors of `buffers` (the state a step through them left).
bool is_buffer_set(const LmState& state, const LmState& buffers) {
  return pairwise(state, buffers, [](const at::Tensor& a, const at::Tensor& b) { return a.is_same(b); });
}

// Whether `state` fits `buffers`: the same tensors, shapes and dtypes.
bool fits(const LmState& state, const LmState& buffers) {
  return pairwise(state, buffers, [](const at::Tensor& a, const at::Tensor& b) {
    return a.sizes() == b.sizes() && a.dtype() == b.dtype() && a.device() == b.device();
  });
}

// Writes `from`'s tensors into `to`'s (which must fit). A step's new state must keep the shapes
// of the old one: the graph was recorded for them.
void copy_tensors(const LmState& from, LmState& to) {
  const auto src = tensors_of(from);
  auto dst = tensors_of(to);
  if (src.size() != dst.size()) throw std::logic_error("graphed step: the step changed the state's layout");
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i]->defined() != dst[i]->defined() || (src[i]->defined() && src[i]->sizes() != dst[i]->sizes()))
      throw std::logic_error("graphed step: the step changed the shape of a state tensor");
    if (dst[i]->defined()) dst[i]->copy_(*src[i]);
  }
}

// A fresh buffer set shaped as `state`: contiguous tensors of its shapes, host fields copied.
LmState buffers_like(const LmState& state) {
  LmState b = state;
  for (at::Tensor* t : tensors_of(b))
    if (t->defined()) *t = at::empty(t->sizes(), t->options());
  return b;
}

// `state`'s host fields (stream positions, counts) with the tensors of `buffers`, which fits it.
// The buffers' own host fields are those of the state they were made for, long ago.
LmState rebound(const LmState& state, const LmState& buffers) {
  LmState out = state;
  auto to = tensors_of(out);
  const auto from = tensors_of(buffers);
  for (size_t i = 0; i < to.size(); ++i) *to[i] = *from[i];
  return out;
}

// `state` after one token, its tensors those of `buffers`: what the step does to the host fields
// of a graphable model (LanguageModelImpl::step, MemoryLayerImpl::step and the attention's
// forward at chunk 1), which a replay does not run.
LmState advanced(const LmState& state, const LmState& buffers) {
  LmState next = rebound(state, buffers);
  next.position = state.position + 1;
  for (BlockState& b : next.blocks) {
    if (!b.memory.memory.empty()) b.memory.tokens += 1;
    if (b.attention.k.defined()) b.attention.next += 1;
  }
  return next;
}

}  // namespace

struct GraphedStep::Graph {
  CudaGraph graph;
  LmStepOutput out;  // in the graph's memory pool: rewritten at each replay
};
bool GraphedStep::capture_available() { return CudaGraph::available(); }

GraphedStep::GraphedStep(bool capture) : capture_(capture) {}
GraphedStep::~GraphedStep() = default;

void GraphedStep::reset() {
  for (auto& parity : graphs_)
    for (auto& g : parity) g.reset();
  buffers_ = {};
  token_ = at::Tensor();
}

bool GraphedStep::applies(const LanguageModelImpl& model, const LmState& state, int64_t chunk) {
  return not_applicable(model, state, chunk).empty();
}

std::string GraphedStep::not_applicable(const LanguageModelImpl& model, const LmState& state, int64_t chunk) {
  const LmConfig& c = model.config();
  if (chunk != 1) return "the inspect chunk is over 1";  // the chunked step branches on the stream position
  if (c.block == BlockKind::Mac) return "a MAC block's step branches on the host";
  if (c.block == BlockKind::Hope) return "a HOPE block's step branches on the host";
  if (c.uses_cms()) return "the CMS levels' step branches on the host";
  if (static_cast<int64_t>(state.blocks.size()) != model.layers()) return "the state is not this model's";
  if (gate_override_in_force(model)) return "a gate override is in force";
  for (int64_t l = 0; l < model.layers(); ++l) {
    const Block& block = model.block(l);
    if (block->attention) {
      // A full cache keeps its shape, and a shorter one that holds the whole stream is padded to
      // it (pad_caches). Window 1 keeps no key, and the token's position would then come from the
      // host, fixed by the capture (sliding_window_attention.cpp).
      const KvCache& cache = state.blocks[static_cast<size_t>(l)].attention;
      const int64_t window = block->attention->options().window;
      if (window < 2) return "an attention window of 1 takes its position from the host";
      if (!cache.k.defined()) return "an attention cache is missing";
      const int64_t keys = cache.k.size(2);
      if (keys > window - 1 || (keys < window - 1 && keys != cache.next))
        return "an attention cache is not the stream's";
    }
  }
  return "";
}

bool GraphedStep::gate_override_in_force(const LanguageModelImpl& model) {
  for (int64_t l = 0; l < model.layers(); ++l) {
    const Block& block = model.block(l);
    if (block->memory)
      for (int g = 0; g < kGateCount; ++g)
        if (block->memory->override_of(static_cast<Gate>(g)).mode != GateOverride::Mode::Off) return true;
  }
  return false;
}

void GraphedStep::pad_caches(const LanguageModelImpl& model, LmState& state) {
  for (int64_t l = 0; l < model.layers() && l < static_cast<int64_t>(state.blocks.size()); ++l) {
    const Block& block = model.block(l);
    KvCache& cache = state.blocks[static_cast<size_t>(l)].attention;
    if (!block->attention || !cache.k.defined()) continue;
    const int64_t full = block->attention->options().window - 1, keys = cache.k.size(2);
    if (keys >= full) continue;
    if (keys != cache.next)
      throw std::logic_error("graphed step: a cache short of its window that does not hold the whole stream");
    auto zeros = [&](const at::Tensor& like) {
      std::vector<int64_t> sizes = like.sizes().vec();
      sizes[2] = full - keys;
      return at::zeros(sizes, like.options());
    };
    // New tensors: a state's tensors are replaced, never edited (a frame may still view them).
    cache.k = at::cat({zeros(cache.k), cache.k}, 2);
    cache.v = at::cat({zeros(cache.v), cache.v}, 2);
    cache.positions = at::cat({at::arange(keys - full, 0, cache.positions.options()), cache.positions});
  }
}

LmStepOutput GraphedStep::step(const LanguageModelImpl& model, const at::Tensor& token, LmState& state,
                               StepDetail detail) {
  pad_caches(model, state);  // a sequence's first tokens: the shape of a full cache
  // Which buffer set the token reads: the one the last token wrote, or S0 for any other state.
  int parity = 0;
  if (!buffers_[0].blocks.empty() && is_buffer_set(state, buffers_[1])) {
    parity = 1;
  } else if (buffers_[0].blocks.empty() || !is_buffer_set(state, buffers_[0])) {
    if (buffers_[0].blocks.empty() || !fits(state, buffers_[0]) || !token_.defined() ||
        token_.sizes() != token.sizes()) {
      reset();  // new shapes: new buffers, new graphs
      buffers_ = {buffers_like(state), buffers_like(state)};
      token_ = at::empty(token.sizes(), token.options());
    }
    copy_tensors(state, buffers_[0]);
  }
  token_.copy_(token);
  LmState& from = buffers_[static_cast<size_t>(parity)];
  LmState& to = buffers_[static_cast<size_t>(1 - parity)];
  LmStepOutput out;
  bool replayed = false;
  if (capture_) {
    try {
      out = replay(model, state, parity, detail);
      replayed = true;
    } catch (const std::exception& e) {
      // An op that cannot be captured (a host sync, say) should not stop the debugger: this
      // model steps without graphs from here, and says why once.
      const std::string what = e.what();
      failure_ = what.substr(0, what.find('\n'));
      std::cerr << "memscope: engine.cuda_graph: capturing the step failed, stepping without the graph: "
                << failure_ << std::endl;
      reset();
      capture_ = false;
      return step(model, token, state, detail);  // on fresh buffers, eagerly
    }
  }
  if (!replayed) {
    LmState work = rebound(state, from);  // the step replaces its tensors: `from` keeps the state before
    out = model.step(token_, work, 1, detail);
    copy_tensors(work, to);
  }
  state = advanced(state, to);
  return out;
}

LmStepOutput GraphedStep::replay(const LanguageModelImpl& model, const LmState& state, int parity,
                                 StepDetail detail) {
  const LmState& from = buffers_[static_cast<size_t>(parity)];
  LmState& to = buffers_[static_cast<size_t>(1 - parity)];
  std::unique_ptr<Graph>& graph = graphs_[static_cast<size_t>(parity)][static_cast<size_t>(detail)];
  if (!graph) {
    auto made = std::make_unique<Graph>();
    made->graph.capture(
        token_.device(),
        [&] {
          // The warm-up's state is thrown away; the buffers are only read by it.
          LmState warm = rebound(state, from);
          model.step(token_, warm, 1, detail);
        },
        [&] {
          // The host fields it reads are this token's; a replay keeps them. None that a graphable
          // model's step reads on a GPU changes from token to token (applies()).
          LmState work = rebound(state, from);
          made->out = model.step(token_, work, 1, detail);
          copy_tensors(work, to);
        });
    graph = std::move(made);
    ++captures_;
  }
  graph->graph.replay();  // on the current stream
  ++replays_;
  return graph->out;  // a copy: the caller's finish_record() must not edit the captured record
}

}  // namespace memscope::model
