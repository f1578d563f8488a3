// One block of the language model: memory and/or sliding-window attention, then a SwiGLU FFN,
// each pre-normalised with a residual (Titans §4). The kind says how memory and attention meet:
//
//   lmm  x += Wm·mem(n(x))
//   mag  x += g ⊙ attn(n(x)) + (1−g) ⊙ Wm·mem(n(x)),  g = σ(W_g n(x))      (learned gate)
//   mal  x += Wm·mem(n(x));  x += attn(n(x))
//   mac  h  = Wr·read(M_segment_start, φ(n(x)))       (retrieved memory tokens)
//        a  = attn(n(x), extra = h)                   (persistent + retrieved + segment)
//        x += a ⊙ σ(Wm·mem(a))                        (memory written from the attention output)
//   swa  x += attn(n(x))                              (no memory: the baseline)
//   hope x += Wm·selfmod(n(x))                        (self-modifying Titans, SPEC §7)
//
// The FFN is SwiGLU, or with model.ffn = cms (always for hope) the continuum memory system:
//   x += cms(n(x)) − n(x)                             (the CMS levels' residuals, SPEC §7)
//
// forward() (training, chunkwise memory) and step() (one token, the exact sequential memory step
// with its probe record) share every line except the memory call, so with chunk 1 they agree.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "model/memory/continuum_memory.h"
#include "model/memory/memory_layer.h"
#include "model/memory/self_modifying_memory.h"
#include "model/nn/lm_config.h"
#include "model/nn/rms_norm.h"
#include "model/nn/sliding_window_attention.h"
#include "model/nn/swiglu.h"

namespace memscope::model {

struct BlockState {
  MemoryState memory;                 // empty for swa
  KvCache attention;                  // empty for lmm
  std::vector<at::Tensor> retrieval;  // mac: the memory weights at the start of the current segment
  SelfModState selfmod;               // hope: the self-modifying memories (empty otherwise)
  CmsState cms;                       // model.ffn = cms or hope: the CMS levels (empty otherwise)

  BlockState detached() const;
};

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const LmConfig& config, const MemoryRule& rule);

  BlockState initial_state(int64_t batch) const;

  // x: [B,T,D] → [B,T,D]; the memory runs its chunkwise form with chunk b.
  at::Tensor forward(const at::Tensor& x, BlockState& state, int64_t chunk) const;

  // x_t: [B,D] → [B,D]; the memory runs its exact sequential step. `record` receives what the
  // memory did (left untouched when the block has no memory or TTL is off), in `detail`
  // (Record or RecordLater; OutputOnly when `record` is null).
  at::Tensor step(const at::Tensor& x_t, BlockState& state, StepRecord* record, int64_t chunk = 1,
                  StepDetail detail = StepDetail::Record) const;

  BlockKind kind() const { return config_.block; }

  MemoryLayer memory{nullptr};
  SelfModifyingMemory selfmod{nullptr};
  ContinuumMemory cms{nullptr};
  SlidingWindowAttention attention{nullptr};
  RmsNorm norm_memory{nullptr}, norm_attention{nullptr}, norm_ffn{nullptr};
  SwiGlu ffn{nullptr};      // unless the CMS takes its place
  at::Tensor w_memory_out;  // [D, H·d_v]: memory heads → model width (hope: [D, D])
  at::Tensor w_gate;        // mag: [D, D] gate projection;  mac: unused
  at::Tensor b_gate;        // mag: [D]
  at::Tensor w_retrieve;    // mac: [H·d, D] retrieval queries
  at::Tensor w_retrieved;   // mac: [D, H·d_v] retrieved memory → tokens

 private:
  // `step_mode`: T must be 1 and the memory layer takes its sequential step (filling `record`);
  // HOPE's memories and the CMS take their chunkwise forms, as outside step mode.
  at::Tensor run(const at::Tensor& x, BlockState& state, int64_t chunk, bool step_mode, StepRecord* record,
                 StepDetail detail) const;
  at::Tensor run_mac(const at::Tensor& x, BlockState& state, int64_t chunk, bool step_mode, StepRecord* record,
                     StepDetail detail) const;
  // The memory's output for x [B,T,D], projected to [B,T,D].
  at::Tensor memory_out(const at::Tensor& x, BlockState& state, int64_t chunk, bool step_mode,
                        StepRecord* record, StepDetail detail) const;

  LmConfig config_;
};
TORCH_MODULE(Block);

}  // namespace memscope::model
