// HOPE's self-modifying Titans (SPEC §7, NL §8, seed 004 changes 1–4). The key, value, lr and
// retain projections are themselves memories M_k, M_v, M_η, M_α beside the main memory M, each a
// 2-layer residual MLP of the model width d (SPEC §3: M(z) = z + LN(W_1 GELU(W_2 z))). Per token x_t:
//
//   k_t = normalize(M_k(x_t)),  v_t = M_v(x_t),  q_t = normalize(W_q x_t)       (q stays static)
//   (model.hope.conv: a depthwise causal conv of width 4 after W_q, M_k and M_v, before the
//   normalisation, as SPEC §2 puts one after each projection: the key at a value's token can then
//   carry the token before it, which a binding task needs)
//   η_t = max_lr·sigmoid(M_η(x_t) + b_η),  α_t = sigmoid(M_α(x_t) + b_α)        (per feature, ∈ R^d;
//   model.hope.shared_gates: the sigmoid of the logits' mean over features, the same for every feature)
//   every memory □ ∈ {k, v, η, α, M} writes k_t → v̂_□ with the inner loss ½‖M_□(k_t) − v̂_□‖²/d
//   (normalised by its element count, seed 004 change 6), where v̂_M = v_t and the others use the
//   self-generated target v̂_□ = sg(M_□(v_t)); the write is dgd with the diagonal preconditioner
//   (dgd_preconditioner.h) at α_t, η_t and k_t (s·η_t for M_k, M_v, M_η and M_α with
//   model.hope.self_lr_scale s, default 1: SPEC §7 shares η_t), with optional inner clipping;
//   y_t = M_t(q_t), read after the write.
//
// All reads of a step use the memories before the step's writes. Updates run in training and
// in inference alike, with or without gradients (seed 004 change 4); with grad mode on they are
// differentiable (create_graph), so the outer loss reaches every initial state through them.
// The auxiliary retrieval loss MSE(M(k_t), sg(v_t)) + MSE(sg(M(k_t)), v_t) at the pre-write M
// (seed 004 change 1) accumulates in the state; the trainer adds it with its weight.
//
// SPEC §9 for these memories (train.chunk b): inside a chunk of b tokens every read that feeds a
// write (k_t, v_t, η_t, α_t, the targets, the inner gradients and the aux loss) uses the memories
// as they were at the chunk start, while y_t still reads M_t after its write. b = 1 is the rule
// above. step() is the sequential reference (autograd inner gradients, one token at a time, the
// chunk-start memories carried in the state's anchor); forward() is the chunkwise form
// (self_modifying_chunkwise.cpp): analytic rank-1 inner gradients, the dgd recurrence unrolled
// over the chunk, and only the chunk-end memories materialised.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <vector>

namespace memscope::model {

enum class SelfModMemory { Key, Value, Lr, Retain, Main };
inline constexpr int kSelfModCount = 5;
const char* to_string(SelfModMemory m);  // "k", "v", "eta", "alpha", "memory"

struct SelfModOptions {
  int64_t d_model = 64;
  double max_lr = 1.0;      // η_t's ceiling (SPEC §1)
  double inner_clip = 0.0;  // per memory: g ← g·min(1, clip/‖g‖) (0 = off)
  bool conv = false;        // model.hope.conv: depthwise causal conv of width 4 after q, k and v
  // model.hope.self_lr_scale: M_k, M_v, M_η and M_α write with s·η_t (and precondition with it),
  // the memory M with η_t. 1 is SPEC §7's shared η_t.
  double self_lr_scale = 1.0;
  // model.hope.shared_gates: η_t and α_t are one value per memory and token (the mean of the
  // per-feature logits), not one per feature. SPEC §7 leaves their granularity open.
  bool shared_gates = false;
};

struct SelfModState {
  // Per memory (SelfModMemory order): {W1 [B,1,d,4d], W2 [B,1,4d,d]}; axis 1 is a single head.
  std::array<std::vector<at::Tensor>, kSelfModCount> weights;
  at::Tensor aux;      // [B] the auxiliary retrieval loss summed over the tokens so far
  at::Tensor last_error;  // [B,5] the last write's target error per memory (SelfModRecord), for the probes
  at::Tensor last_retain, last_lr;  // [B,d] the last write's per-feature α_t and η_t, for the probes
  // [B,d] the last write's diagonal dgd preconditioner p = α_t − η_t ⊙ k_t² (dgd_preconditioner.h): the
  // retention map's eigenvalues, whose range is the effective retention (SPEC §8).
  at::Tensor last_precond;
  at::Tensor conv;  // model.hope.conv: the last 3 tokens' pre-conv [q|k|v], [B,3,3d]; undefined without it
  int64_t tokens = 0;  // tokens since the start of the stream
  // Inside a chunk (tokens % anchor_chunk ≠ 0): the weights at its start, which the chunk's writes
  // read (SPEC §9). Chunks sit at multiples of b from the stream start, so a call that ends inside
  // a chunk leaves the anchor for the next. Empty, and anchor_chunk 0, between chunks.
  std::array<std::vector<at::Tensor>, kSelfModCount> anchor;
  int64_t anchor_chunk = 0;
  // The chunkwise form's five memories on one axis, {W1 [B,5,d,4d], W2 [B,5,4d,d]}, of which
  // `weights` are slices after a chunk, and the same for `anchor`. Used only while every weight is
  // still its slice (slices_of; anything that replaces a weight, e.g. step() or a probe, makes the
  // next chunk stack them afresh). clone() and detached() keep the slices slices.
  std::array<at::Tensor, 2> stacked, anchor_stacked;

  // Whether the next token continues a chunk of b that an earlier token began: its writes then read
  // the anchor. (A stream whose chunk size changed mid-chunk starts a new chunk there.)
  bool continues_chunk(int64_t chunk) const;

  SelfModState clone() const;
  SelfModState detached() const;
};

// Whether every memory's {W1, W2} in `w` is its slice of `stack` (memory m at index m of axis 1).
bool slices_of(const std::array<at::Tensor, 2>& stack,
               const std::array<std::vector<at::Tensor>, kSelfModCount>& w);

// The five memories on one axis: `stack` itself where `w` are its slices, else stacked afresh (a
// copy of 2·B·5·d·4d floats).
std::array<at::Tensor, 2> stack_memories(const std::array<std::vector<at::Tensor>, kSelfModCount>& w,
                                         const std::array<at::Tensor, 2>& stack);

// What one step did, for the probes and tests. [B,d] unless noted.
struct SelfModRecord {
  at::Tensor k, v, q;
  at::Tensor retain, lr;  // α_t, η_t per feature
  std::array<at::Tensor, kSelfModCount> target;        // v̂_□ [B,d]
  std::array<at::Tensor, kSelfModCount> target_error;  // [B] ½‖M_□(k_t) − v̂_□‖²/d before the write
};

class SelfModifyingMemoryImpl : public torch::nn::Module {
 public:
  explicit SelfModifyingMemoryImpl(SelfModOptions options);

  const SelfModOptions& options() const { return options_; }
  // The live knobs memory.lr.max and memory.inner.clip (LanguageModel::set_live_rule).
  void set_live(double max_lr, double inner_clip) {
    options_.max_lr = max_lr;
    options_.inner_clip = inner_clip;
  }

  // Every memory at its initial (outer) state, aux = 0.
  SelfModState initial_state(int64_t batch) const;

  // One token x_t [B,d] → y_t [B,d]: the sequential reference, in chunks of b (header comment).
  at::Tensor step(const at::Tensor& x_t, SelfModState& state, SelfModRecord* record = nullptr,
                  int64_t chunk = 1) const;

  // x [B,T,d] → [B,T,d]: the chunkwise form, equal to step() over the tokens with the same b. Any
  // T, from any stream position: the model's per-token step (the debugger's) calls it with T = 1.
  at::Tensor forward(const at::Tensor& x, SelfModState& state, int64_t chunk = 1) const;

  // M_□(z) for z [B,…,d] at the state's weights (z gets a head axis internally).
  at::Tensor read(SelfModMemory m, const SelfModState& state, const at::Tensor& z) const;

  at::Tensor w_q;                                   // [d,d]
  std::array<at::Tensor, kSelfModCount> w1_0, w2_0;  // [1,d,4d], [1,4d,d]: the initial states
  std::array<at::Tensor, kSelfModCount> ln_weight, ln_bias;  // [1,d] (outer, SPEC §3)
  at::Tensor b_lr, b_retain;                        // [d]: η starts near 0.01·max_lr, α near 0.95
  at::Tensor conv_weight;                           // [3d,4] (model.hope.conv only): taps of the q|k|v conv

 private:
  at::Tensor read_weights(SelfModMemory m, const std::vector<at::Tensor>& w, const at::Tensor& z) const;
  // η_t or α_t from its logits [...,d]: per feature, or shared (options_.shared_gates).
  at::Tensor gate(const at::Tensor& logits) const;
  // x [B,n,d], tokens that lie inside one chunk of b: one chunk of forward(), or what is left of
  // one that an earlier call began.
  at::Tensor forward_chunk(const at::Tensor& x, SelfModState& state, int64_t chunk) const;
  // What a chunk's tokens leave: their outputs, the memories' stacks at the chunk's end, and the last
  // write's target errors [B,5], α, η and the main memory's preconditioner [B,d].
  struct ChunkEnd {
    at::Tensor y, w1, w2, error, retain, lr, precond;
  };
  // The chunk in ATen (self_modifying_chunkwise.cpp): its writes read `chunk_start` and start from
  // `base` (the same stacks unless `continuing`). Updates state.aux and state.conv.
  ChunkEnd chunk_aten(const at::Tensor& x, SelfModState& state, const std::array<at::Tensor, 2>& base,
                      const std::array<at::Tensor, 2>& chunk_start, bool continuing) const;
  // One token x [B,1,d] without autograd, on the CPU in float32, written out as loops
  // (fused_selfmod_step.cpp): the debugger's step. Equal to chunk_aten to float32 rounding.
  bool fused_token_applies(const at::Tensor& x, const std::array<at::Tensor, 2>& base,
                           const std::array<at::Tensor, 2>& chunk_start) const;
  ChunkEnd fused_token(const at::Tensor& x, SelfModState& state, const std::array<at::Tensor, 2>& base,
                       const std::array<at::Tensor, 2>& chunk_start) const;

  SelfModOptions options_;
};
TORCH_MODULE(SelfModifyingMemory);

}  // namespace memscope::model
