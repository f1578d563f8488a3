// The debugger's one-token step on fixed buffers, replayed as a CUDA graph (issue 23).
//
// On a GPU one token of demo-mqar is a few hundred small kernels, each launched from the host, so
// the step is bound by launches, not by the GPU (README "On a GPU machine"). A CUDA graph launches
// them all at once. A graph replays fixed addresses, so the step runs on fixed buffers:
//
// - two sets of state buffers, S0 and S1. The graph of parity p reads the token buffer and S_p,
//   and writes the state after the token into S_{1−p}; the next token takes the other parity. So
//   the state before a token (the probes' M_{t−1}) stays valid until the token after it;
// - the outputs (logits, records) live in the graph's own memory pool and are overwritten when
//   the same graph replays, two tokens later. Whoever keeps a state or record longer clones it
//   (keyframes do);
// - a state that is not one of the two buffer sets (a new sequence, a rewind, a reset) is copied
//   into S0 first.
//
// What the capture fixes, and so what must not change between replays: every tensor's shape, the
// live rule and its knobs, the gate overrides, the parameters' addresses. An attention cache grows
// over a sequence's first window−1 tokens, so it is padded to its full length first (pad_caches):
// one graph then takes every token from the first. reset() drops the graphs;
// the engine calls it on any command, training step or rewind, and the next step captures again.
//
// With capture off, or after a capture failed, the same buffers are stepped eagerly: the CPU tests
// check the buffer logic and the failure there, and the CUDA tests the graphs against the plain step.
#pragma once
#include <array>
#include <memory>
#include <string>

#include "model/nn/language_model.h"

namespace memscope::model {

class GraphedStep {
 public:
  // capture: record and replay CUDA graphs; false steps the fixed buffers eagerly. Without a CUDA
  // build or a CUDA model the first capture fails (failure() says why) and the buffers step eagerly.
  explicit GraphedStep(bool capture);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  // Whether this build can capture CUDA graphs.
  static bool capture_available();

  // Whether step() can take this token: chunk 1; no MAC, HOPE or CMS block (their steps branch on
  // the stream position on the host); every attention cache full or holding every token since the
  // stream began (pad_caches); no gate override in force (an override's values are copied from the
  // host at every step); on CUDA when capturing.
  static bool applies(const LanguageModelImpl& model, const LmState& state, int64_t chunk);
  // Why step() cannot take this token, in a few words for the status line ("a HOPE block's step
  // branches on the host"); empty where it can. applies() is this being empty.
  static std::string not_applicable(const LanguageModelImpl& model, const LmState& state, int64_t chunk);

  // Whether any memory layer has a gate override in force. Its values are copied from the host at
  // every step, which a graph can neither repeat nor capture; the training pass's graph
  // (model/train/graphed_train_pass.h) steps aside for it too.
  static bool gate_override_in_force(const LanguageModelImpl& model);

  // Pads each attention cache of `state` that holds fewer than window−1 keys, all of them since the
  // stream began, to window−1: zero keys and values at the positions before the stream's start,
  // which no query sees (sliding_window_attention.cpp). Positions stay consecutive, so the next
  // token's position is still the last key's plus one. The step's outputs are the same (on the
  // CPU's fused step the same bits); only the cache's shape is that of a full one.
  static void pad_caches(const LanguageModelImpl& model, LmState& state);

  // model.step(token, state, 1, detail), on the buffers (see above). `state` becomes the state
  // after the token, whose tensors are one buffer set.
  LmStepOutput step(const LanguageModelImpl& model, const at::Tensor& token, LmState& state,
                    StepDetail detail);

  // Drops the graphs and buffers: the next step captures again.
  void reset();

  int64_t captures() const { return captures_; }  // graphs recorded since construction
  int64_t replays() const { return replays_; }    // steps taken through a graph
  // Why capturing failed (then every later step runs the buffers eagerly); empty while it has not.
  const std::string& failure() const { return failure_; }

 private:
  struct Graph;  // one captured step: its graph and what it returned
  static constexpr int kDetails = 3;

  // The token through the graph of this parity and detail, captured first if need be.
  LmStepOutput replay(const LanguageModelImpl& model, const LmState& state, int parity, StepDetail detail);

  bool capture_;
  std::array<LmState, 2> buffers_;                                      // S0, S1 (empty until the first step)
  at::Tensor token_;                                                    // [B] int64
  std::array<std::array<std::unique_ptr<Graph>, kDetails>, 2> graphs_;  // [parity][detail]
  int64_t captures_ = 0, replays_ = 0;
  std::string failure_;
};

}  // namespace memscope::model
