// Causal sliding-window attention with RoPE, persistent tokens and a KV cache (Titans §4).
//
// A query at stream position p sees the keys at positions p−W+1 … p (W = `window`, itself
// included) and every persistent token. With `segment` S > 0 it additionally sees only keys of
// its own segment ⌊p/S⌋ (MAC's segment attention). `extra` tokens (MAC's retrieved memory) are
// keys and values at the same positions as the tokens they come with.
//
// forward() on T tokens and T calls on one token each give the same outputs: both go through
// the same cache, which keeps exactly the keys a future query can still see.
#pragma once
#include <utility>
#include <vector>
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace memscope::model {

struct KvCache {
  at::Tensor k, v;       // [B,H,n,d] keys (rotated) and values still visible to future queries
  at::Tensor positions;  // [n] int64 stream positions of those keys (negative: padding no query sees)
  int64_t next = 0;      // stream position of the next token

  KvCache detached() const;
};

struct AttentionOptions {
  int64_t d_model = 64;
  int64_t heads = 2;
  int64_t window = 16;
  int64_t persistent = 0;  // learned tokens every query attends to, without position
  int64_t segment = 0;     // 0: no segment restriction
  double rope_base = 10000.0;
};

class SlidingWindowAttentionImpl : public torch::nn::Module {
 public:
  explicit SlidingWindowAttentionImpl(AttentionOptions options);

  KvCache empty_cache(int64_t batch) const;

  // x: [B,T,D] (and extra, when given, [B,T,D]) → [B,T,D]. Advances the cache by T tokens.
  at::Tensor forward(const at::Tensor& x, KvCache& cache, const at::Tensor& extra = {}) const;

  const AttentionOptions& options() const { return options_; }

  at::Tensor w_q, w_k, w_v, w_o;   // [D,D]
  at::Tensor persistent_tokens;    // [P,D] (undefined when P = 0)

 private:
  at::Tensor heads_of(const at::Tensor& x) const;  // [B,T,D] → [B,H,T,d]

  // fused_attention_step.cpp: the one-token step without autograd on the CPU in float32, in one
  // pass per head (issue 20: the debugger's path is ATen-call-bound, not FLOP-bound). It computes
  // what forward() does for T = 1 and leaves the cache as forward() would.
  bool fused_step_applies(const at::Tensor& x, const KvCache& cache, const at::Tensor& extra) const;
  at::Tensor fused_step(const at::Tensor& x, KvCache& cache) const;
  // [W_q; W_k; W_v]ᵀ and the persistent tokens' keys and values, rebuilt when a weight changes.
  void refresh_fused_weights() const;
  mutable at::Tensor fused_qkv_, persistent_keys_, persistent_values_;
  mutable std::vector<std::pair<const void*, uint32_t>> fused_key_;

  AttentionOptions options_;
  int64_t head_dim_;
};
TORCH_MODULE(SlidingWindowAttention);

}  // namespace memscope::model
