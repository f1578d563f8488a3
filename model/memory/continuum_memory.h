// The continuum memory system of HOPE (SPEC §7, NL §7): K MLP memory levels, level ℓ updated
// once every C_ℓ tokens (default periods 1, 4, 32, 128).
//
// Level ℓ is a residual MLP memory over the model width, M_ℓ(z) = z + LN(W_1 GELU(W_2 z)) (SPEC §3)
// with outer projections k = W_k z, v = W_v z and an lr gate η_t = max_lr·sigmoid(w·z_t + b). At
// its weights W (fixed for the whole period) it
//   reads    y_t = M_ℓ(z_t)                                  (at M_0 the level is a plain FFN),
//   collects G += κ_t η_t ∇_W ℓ(M_W(k_t), v_t),  ℓ = ½‖·‖²/D  (seed 004 changes 6; κ_t = clip),
//   updates  W ← W − G, G ← 0  after the token whose stream position p has (p + 1) % C_ℓ = 0.
// Positions count from the start of the stream, never from the start of a call (seed 004
// change 5), so splitting a stream into calls of any lengths gives the same result. Updates run
// whatever the grad mode or train/eval state (seed 004 change 4); with grad mode on they are
// differentiable, so the outer loss trains W_0, the projections and the gate through them.
//
// Variants (NL §7):
//   sequential   y = L_K(…L_1(x)): each level reads the previous level's output (the default);
//   independent  y = x + Σ_ℓ (L_ℓ(x) − x): every level reads x, their residuals add up;
//   nested       the chain of `sequential`, where each level's initial state is learned by the
//                next slower level: whenever level ℓ+1 applies an update, level ℓ restarts from
//                level ℓ+1's new weights (G ← 0). A level's context is thus one period of the level
//                above it, and the resets cascade from slow to fast. At the stream start every level
//                starts from its own W_0, so the outer loss still trains all of them.
//
// Two forms, as for every memory (DESIGN principle 4): step() is the per-token reference;
// forward() batches each stretch between updates (one read and one gradient per stretch).
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

namespace memscope::model {

enum class CmsVariant { Sequential, Independent, Nested };
const char* to_string(CmsVariant v);  // "sequential", "independent", "nested"
// The knob's text → variant; throws UserError naming `key` for anything else.
CmsVariant parse_cms_variant(const std::string& text, const std::string& key);

struct CmsOptions {
  int64_t d_model = 64;
  std::vector<int64_t> periods{1, 4, 32, 128};  // C_ℓ, one per level
  CmsVariant variant = CmsVariant::Sequential;
  double max_lr = 1.0;      // η_t = max_lr·sigmoid(w·z + b), b starts at −4.6 (SPEC §1)
  double inner_clip = 0.0;  // κ_t = min(1, clip/‖g_t‖) per token (0 = off)
};

// "1,4,32,128" → {1, 4, 32, 128}; throws UserError naming `key` for anything else.
std::vector<int64_t> parse_cms_periods(const std::string& text, const std::string& key);

struct CmsLevelState {
  std::vector<at::Tensor> weights;      // {W1 [B,1,D,4D], W2 [B,1,4D,D]}, the "head" axis is 1
  std::vector<at::Tensor> accumulated;  // G, shaped like `weights`
  // Whether G is known to be zero (at the start, and after an update or a reset), so that a stretch
  // that ends its period writes its own sum into W directly: for a period-1 level, every token. A
  // state made any other way leaves it false, which is always right, and a few weight-sized passes
  // slower. Whatever writes G must keep it true only while G is zero.
  bool accumulated_zero = false;
};

struct CmsState {
  std::vector<CmsLevelState> levels;
  int64_t tokens = 0;  // stream position of the next token

  CmsState clone() const;
  CmsState detached() const;
};

// What forward(record = true) saw, per level: weights after each token and the update ticks.
struct CmsTrace {
  std::vector<std::vector<at::Tensor>> weights;  // [level][W1, W2]: [B,T,D,4D], [B,T,4D,D]
  std::vector<at::Tensor> tick;                  // [level]: [T], 1 where the level updated
};

class ContinuumMemoryImpl : public torch::nn::Module {
 public:
  explicit ContinuumMemoryImpl(CmsOptions options);

  const CmsOptions& options() const { return options_; }
  // The live knobs memory.lr.max and memory.inner.clip (LanguageModel::set_live_rule).
  void set_live(double max_lr, double inner_clip) {
    options_.max_lr = max_lr;
    options_.inner_clip = inner_clip;
  }
  int64_t levels() const { return static_cast<int64_t>(options_.periods.size()); }

  // W = W_0, G = 0, position 0.
  CmsState initial_state(int64_t batch) const;

  // The per-token reference: x_t [B,D] → [B,D].
  at::Tensor step(const at::Tensor& x_t, CmsState& state) const;

  // x [B,T,D] → [B,T,D], equal to T steps.
  at::Tensor forward(const at::Tensor& x, CmsState& state, CmsTrace* trace = nullptr) const;

  // Whether level ℓ updates after the token at stream position p.
  bool ticks(int64_t level, int64_t position) const {
    return (position + 1) % options_.periods[static_cast<size_t>(level)] == 0;
  }
  // Nested variant: whether level ℓ restarts from level ℓ+1 after the token at position p.
  bool resets(int64_t level, int64_t position) const {
    return options_.variant == CmsVariant::Nested && level + 1 < levels() && ticks(level + 1, position);
  }

  // Whether level ℓ's stretch z [B,1,D] takes the fused step: one token without autograd, on the
  // CPU in float32 (fused_cms_step.cpp, the debugger's step; equal to the ATen form to float32 rounding).
  bool fused_level_step_applies(int64_t level, const at::Tensor& z, const CmsLevelState& s) const;

  // Outer parameters, per level.
  std::vector<at::Tensor> w_k, w_v;              // [D,D]
  std::vector<at::Tensor> w1_0, w2_0;            // [1,D,4D], [1,4D,D]
  std::vector<at::Tensor> ln_weight, ln_bias;    // [1,D]
  std::vector<at::Tensor> lr_w, lr_b;            // [D], [1]

 private:
  // Level ℓ on a stretch z [B,n,D] that lies inside one period: reads, adds the stretch's
  // gradient to G, and applies the update when the stretch ends its period.
  at::Tensor level_stretch(int64_t level, const at::Tensor& z, CmsLevelState& s, bool update) const;
  at::Tensor level_step(int64_t level, const at::Tensor& z_t, CmsLevelState& s, bool update) const;
  at::Tensor fused_level_step(int64_t level, const at::Tensor& z, CmsLevelState& s, bool update) const;
  at::Tensor level_forward(int64_t level, const at::Tensor& z, CmsLevelState& s, int64_t start,
                           CmsTrace* trace) const;
  // The chain of levels over x [B,T,D] (sequential and nested); nested runs it stretch by stretch
  // between resets, because a reset makes a faster level depend on a slower level's state.
  at::Tensor chain_forward(const at::Tensor& x, CmsState& state, CmsTrace* trace) const;
  // Nested: after the token at `position`, restart each level whose slower neighbour updated,
  // slowest first. `trace` (may be null) holds this stretch's weights, whose last token it amends.
  void apply_resets(CmsState& state, int64_t position, CmsTrace* trace) const;

  CmsOptions options_;
};
TORCH_MODULE(ContinuumMemory);

}  // namespace memscope::model
