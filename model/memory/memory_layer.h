// MemoryLayer: one test-time-learning memory (SPEC §1–§6) as a torch::nn::Module. Its outer
// (meta-learned) parameters are the q/k/v projections, the optional causal conv, the gates, φ's
// coefficients, M_0 and (mlp) LN; the inner state lives in a MemoryState owned by the caller.
//
// Two forms of the same recurrence (DESIGN principle 4, SPEC §9):
//   step(x_t, state)            the exact sequential reference, with a StepRecord for the probes;
//   forward(x, state, chunk b)  the chunkwise-parallel form used for training; b = 1 equals step.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/memory/memory_rule.h"
#include "model/memory/memory_state.h"

namespace memscope::model {

struct MemoryLayerOptions {
  int64_t d_model = 64;  // width of the input x
  int64_t heads = 1;
  int64_t head_dim = 0;  // d_k = d_v per head; 0 means d_model / heads
};

// The data-dependent gates of SPEC §1 (+ the Huber threshold δ_t of SPEC §4).
enum class Gate { Retain, Lr, Momentum, Gamma, HuberDelta };
inline constexpr int kGateCount = 5;
const char* to_string(Gate gate);

// A run-time override of one gate (GUI, SPEC §8 "any override in force"). `values` holds one
// value per head, or a single value for all heads. Constant replaces the gate, Multiply scales it.
struct GateOverride {
  enum class Mode { Off, Constant, Multiply };
  Mode mode = Mode::Off;
  std::vector<double> values;
};

// Per-token inputs of the recurrence (SPEC §2), [B,T,H,…]; gates hold the values actually used
// (after the rule's fixed values and any override).
struct ProjectedTokens {
  at::Tensor phi_k;     // [B,T,H,d_φ]
  at::Tensor phi_q;     // [B,T,H,d_φ]
  at::Tensor v;         // [B,T,H,d_v]
  at::Tensor retain;    // [B,T,H] α_t
  at::Tensor lr;        // [B,T,H] η_t
  at::Tensor momentum;  // [B,T,H] β_t
  at::Tensor gamma;     // [B,T,H] the token's own window gate (1 unless `gated`)
  at::Tensor delta;     // [B,T,H] Huber δ_t (1 for other biases)
  // dgd.per_feature only (else undefined): α_t and η_t per input feature of M, [B,T,H,d_φ]; then
  // `retain` and `lr` above hold their mean over the features (for the probes' per-head plots).
  at::Tensor retain_feature, lr_feature;
};

// What one sequential step did, for the probes (SPEC §8). Tensors are [B,H,…].
struct StepRecord {
  at::Tensor phi_k, phi_q, v;              // [B,H,d_φ], [B,H,d_φ], [B,H,d_v]
  at::Tensor retain, lr, momentum, delta;  // [B,H]
  at::Tensor gamma;                        // [B,H,c] window weights γ_{t,i}, oldest first
  at::Tensor token_gamma;                  // [B,H] this token's own window gate
  at::Tensor retain_feature, lr_feature;   // [B,H,d_φ] (dgd.per_feature only, else undefined)
  at::Tensor key_squares;                  // [B,H,d_φ] k̄² of the MLP dgd preconditioner (else undefined)
  at::Tensor loss_before;                  // [B,H] L_t(M_{t−1})
  at::Tensor loss_after;                   // [B,H] L_t(M_t); with StepDetail::RecordLater, see below
  // StepDetail::RecordLater: what computes loss_after from the weights after the write (M_t),
  // which finish_record() runs and clears.
  std::function<at::Tensor(const std::vector<at::Tensor>& memory_after)> loss_after_later;
  std::vector<at::Tensor> gradient;  // g_t per memory weight (state.names order); empty with RecordLater
  std::vector<at::Tensor> ns_output;       // NS_k(S_t) per weight (muon only, else empty)
  // With grad mode on, a view of S_t that only the NS call reads: the gradient at it is the part
  // of ∂L/∂S_t that flows through this token's NS (inner_backward.h). Muon only.
  std::vector<at::Tensor> ns_input;
  // The fused steps' (MLP, linear, window), summed as they write them, in double: Σ S_t² and
  // Σ (M_t − M_{t−1})² of each weight, [B,H,weights,2] (empty for the general step). The probes
  // read ‖S‖ and ‖ΔM‖ here instead of S_t and M_{t−1}, whose lines the stepping core has just
  // written (fused_probes.cpp).
  std::vector<double> weight_squares;
};

struct StepOutput {
  at::Tensor y;  // [B,H,d_v]
  StepRecord record;
};

// What a sequential step computes beside its output and its new state. A step nobody probes
// (forward_sequential without a trace, an unprobed inspect step) skips the inner losses before
// and after the write, and the record's copies: issue 20's "records only for probed steps".
// RecordLater is the engine's record, for its probes: Record with the loss after the write left for
// finish_record() by the general step (for an MLP memory that is one more pass of the window
// through the memory, 80 µs a layer of Titans-MLP's general step: the engine's probes compute it on
// their own thread instead of the stepping one), and without the per-weight gradients (`gradient`
// left empty): no probe reads them, and the fused MLP step's copy of them was half its record's
// cost (64 KB a Titans-MLP token; 13-16 -> 8 µs a record, AMD VM). The fused steps compute their
// loss after at once: the linear ones' is a few multiply-adds, and the MLP one's (c rows a head)
// cost the engine more when left to the probes' thread than when done here (fused_mlp_step.cpp).
enum class StepDetail { Record, RecordLater, OutputOnly };

// Computes what a RecordLater step left for later (loss_after), once; nothing for a whole record.
// `memory_after` is M_t, the step's new state.memory, or a copy of it: the engine's probes pass
// their own copy, made on the stepping thread, so that their thread never reads the lines that the
// next step reads (README "The probes read copies"). The record's other tensors are its own, so
// this may run on another thread than the step, once the step has returned.
void finish_record(StepRecord& record, const std::vector<at::Tensor>& memory_after);

// Everything per token, [B,T,H,…], for traces and tests (forward with record = true).
struct ForwardTrace {
  ProjectedTokens inputs;
  at::Tensor gamma;                      // [B,T,H,c] window weights, oldest first
  at::Tensor loss_before, loss_after;    // [B,T,H]
  std::vector<at::Tensor> memory;        // states after each token, per weight: [B,T,H,…]
  std::vector<at::Tensor> momentum;      // S after each token, per weight: [B,T,H,…]
  at::Tensor latent;                     // lq-normalize's A after each token, else undefined
};

struct ForwardOutput {
  at::Tensor y;  // [B,T,H,d_v]
  std::optional<ForwardTrace> trace;
};

// Where a new stream starts: the momentum reset policy (SPEC §5) decides whether S survives.
enum class Boundary { Sequence, Batch };

class MemoryLayerImpl : public torch::nn::Module {
 public:
  MemoryLayerImpl(MemoryRule rule, MemoryLayerOptions options);

  const MemoryRule& rule() const { return rule_; }
  int64_t heads() const { return heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t feature_dim() const { return feature_dim_; }
  int64_t d_model() const { return d_model_; }
  std::vector<std::string> memory_names() const;

  // A fresh state (M = M_0, S = 0, empty window) for `batch` sequences on the parameters' device.
  MemoryState initial_state(int64_t batch) const;

  // Reset everything for the given heads (all when empty): M = M_0, S = 0, window and conv emptied.
  void reset(MemoryState& state, const std::vector<int64_t>& heads = {}) const;

  // A new sequence (or batch) begins: M, window, conv and counter reset; S per `rule().reset`.
  void begin(MemoryState& state, Boundary boundary) const;

  // q, k, v, φ and the gates for x [B,T,D]; advances the conv state.
  ProjectedTokens project(const at::Tensor& x, MemoryState& state) const;

  // The exact sequential step on x_t [B,D] (sequential_step.cpp). With chunk b > 1 it takes its
  // gradient at the chunk-start memory, as forward(x, state, b) does: token by token, the training
  // form (SPEC §9's loop frozen at chunk starts).
  // StepDetail::OutputOnly leaves the record empty (y and the state are the same bits).
  StepOutput step(const at::Tensor& x_t, MemoryState& state, int64_t chunk = 1,
                  StepDetail detail = StepDetail::Record) const;

  // The chunkwise-parallel form on x [B,T,D] with chunk size b (chunkwise_forward.cpp).
  // Differentiable when grad mode is on; `record` also returns the per-token trace.
  ForwardOutput forward(const at::Tensor& x, MemoryState& state, int64_t chunk, bool record = false) const;

  // Reads M(φ) for φ [B,T,H,d_φ] from the state's current memory, without writing: [B,T,H,d_v].
  at::Tensor read(const MemoryState& state, const at::Tensor& phi) const;

  // Every token of x [B,T,D] reads the memory as it is and nothing is written: the memory stays
  // where it is (at M_0 for a fresh state). This is the "TTL off" ablation; the conv advances.
  at::Tensor forward_frozen(const at::Tensor& x, MemoryState& state) const;

  // φ(normalize(z)) per head for z [B,T,H,d]: the key/query features of SPEC §2, for callers
  // (MAC retrieval) that project their own queries.
  at::Tensor features(const at::Tensor& z) const;

  // step() over every token of x, stacked like forward's output (the reference for tests).
  ForwardOutput forward_sequential(const at::Tensor& x, MemoryState& state, bool record = false) const;

  // Replaces the rule with one that differs only in knobs that are live (memory.lr.max, memory.ns.*,
  // …; see model/config/knobs.h): the parameters and the state's shapes stay valid.
  void set_live_rule(const MemoryRule& rule);

  // The fused step (fused_linear_step.cpp) is on by default where it applies; off, every step
  // takes the general path of sequential_step.cpp, the reference the fused one is tested against.
  // The same switch keeps the chunkwise form's ATen reference (fused_linear_chunkwise.cpp and the
  // MLP dgd form's decayed_contractions.cpp are its fused parts).
  void set_fused_step(bool on) { fused_step_on_ = on; }
  bool fused_step_on() const { return fused_step_on_; }
  // The chunkwise form of the linear memory takes a call's whole chunks all at once
  // (linear_chunk_scan.h), or chunk by chunk, the loop it is tested against. Unset, the scan runs
  // off the CPU only: it makes 2.4× fewer ATen calls (a GPU's kernel launches) in a training step,
  // but on the CPU, where a call costs little, that step measured 10–20% slower with it.
  void set_chunk_scan(std::optional<bool> on) { chunk_scan_ = on; }

  void set_override(Gate gate, GateOverride value);
  const GateOverride& override_of(Gate gate) const { return overrides_[static_cast<int>(gate)]; }
  void clear_overrides();

  // Window weights by position (oldest first) before the per-token gate: [c]. The inner loss's
  // 1/d_v (memory.inner.normalize) is not in them: see inner_loss_scale (attentional_bias.h).
  at::Tensor position_weights(const at::TensorOptions& options) const;

  // The MLP memory read M(z) = z + LN(W_1 GELU(W_2 z)) (SPEC §3) with batched weights.
  at::Tensor mlp_read(const at::Tensor& z, const at::Tensor& w1, const at::Tensor& w2) const;

  // Outer parameters (registered; exposed for tests and the trainer).
  at::Tensor w_q, w_k, w_v;                  // [H·d, D]
  at::Tensor conv_weight;                    // [3·H·d, 4] (conv only)
  std::array<at::Tensor, kGateCount> gate_w;  // [H, D] per gate (undefined when unused);
                                             // [H, d_φ, D] for retain and lr with dgd.per_feature
  std::array<at::Tensor, kGateCount> gate_b;  // [H] (per feature: [H, d_φ])
  at::Tensor poly_coefficients;              // [p] a_1..a_p (poly only)
  at::Tensor m0;                             // linear: [H,d_v,d_φ] (memora: logits of M_0; moneta: A_0)
  at::Tensor w1_0, w2_0;                     // mlp: [H,d,4d], [H,4d,d]
  at::Tensor ln_weight, ln_bias;             // mlp: [H,d]

 private:
  at::Tensor gate_value(Gate gate, const at::Tensor& x) const;
  at::Tensor apply_override(Gate gate, const at::Tensor& value) const;
  bool per_feature(Gate gate) const;
  std::vector<at::Tensor> initial_memory(int64_t batch, at::Tensor* latent) const;

  // fused_linear_step.cpp: the sequential step of the common linear rules in one pass per head
  // (issue 20), with the record `detail` asks for (a probed step's). fused_step_applies() says when it
  // computes what step() does: at chunk 1, and for Atlas's rules (fused_window_step) at any chunk b,
  // with the gradient point frozen at the chunk start as step(x, state, b) has it (SPEC §9).
  bool fused_step_applies(const at::Tensor& x_t, const MemoryState& state, int64_t chunk) const;
  StepOutput fused_step(const at::Tensor& x_t, MemoryState& state, StepDetail detail,
                        int64_t chunk = 1) const;
  // fused_window_step.cpp: the rest of fused_step for Atlas's rules, from q|k|v [B,3W] after the
  // conv and the gates α, η, β per (sequence, head).
  StepOutput fused_window_step(const at::Tensor& qkv, const std::vector<float>& alpha,
                               const std::vector<float>& eta, const std::vector<float>& beta,
                               MemoryState& state, StepDetail detail, int64_t chunk) const;
  // fused_mlp_step.cpp: the same for the MLP memory (gd with momentum or Muon, any window).
  StepOutput fused_mlp_step(const at::Tensor& qkv, const std::vector<float>& alpha,
                            const std::vector<float>& eta, const std::vector<float>& beta, MemoryState& state,
                            StepDetail detail, int64_t chunk) const;
  // Whether fused_step hands this rule on (to fused_window_step or fused_mlp_step) after the gates.
  bool window_step_rule() const;
  // [W_q; W_k; W_v; the used gates' W], rebuilt when a parameter changes (by identity and version).
  const at::Tensor& fused_projection() const;
  mutable at::Tensor fused_projection_;
  mutable std::vector<std::pair<const void*, uint32_t>> fused_projection_key_;
  // position_weights() in float32 on the host, for the fused steps to read: five ATen calls a
  // layer and step, made once with the rule (constructor, set_live_rule) instead. Written only
  // there, so a step on another thread only reads it.
  void refresh_position_weights();
  std::vector<float> position_weights_float_;

  MemoryRule rule_;
  int64_t d_model_, heads_, head_dim_, feature_dim_;
  std::array<GateOverride, kGateCount> overrides_;
  bool fused_step_on_ = true;
  std::optional<bool> chunk_scan_;
};
TORCH_MODULE(MemoryLayer);

}  // namespace memscope::model
