// MemoryState: everything a memory layer carries from one token (or call) to the next, per
// sequence of the batch and per head (SPEC §3). The layer creates and resets it
// (MemoryLayer::initial_state, reset); the state itself only knows how to copy and serialise.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <map>
#include <string>
#include <vector>

namespace memscope::model {

struct MemoryState {
  // The memory weights M_t: linear {"M": [B,H,d_v,d_φ]}; mlp {"W1": [B,H,d,4d], "W2": [B,H,4d,d]}.
  std::vector<std::string> names;
  std::vector<at::Tensor> memory;
  // The momentum buffers S_t, shaped like `memory` (zero for dgd).
  std::vector<at::Tensor> momentum;
  // lq-normalize only: Moneta's latent A with M = A/‖A‖_q^{q−2} (SPEC §5); undefined otherwise.
  at::Tensor latent;

  // The chunkwise form takes all gradients of a chunk at the chunk-start memory (SPEC §9). Chunks
  // sit at multiples of b from the stream start, so a call that ends inside a chunk leaves that
  // gradient point here and the next call with the same b continues it (two calls == one call).
  std::vector<at::Tensor> anchor;
  int64_t anchor_chunk = 0;  // the b of `anchor`; 0 when no chunk is in progress

  // The Omega window: the last c−1 tokens' (φ(k), v, γ); γ = 0 marks an empty slot.
  at::Tensor ring_phi;    // [B,H,c−1,d_φ]
  at::Tensor ring_v;      // [B,H,c−1,d_v]
  at::Tensor ring_gamma;  // [B,H,c−1]

  // The causal conv's last 3 pre-conv q, k, v projections, [B,3,3·H·d]; undefined without conv.
  at::Tensor conv;

  int64_t tokens = 0;  // tokens since the start of the stream

  int64_t batch() const { return memory.empty() ? 0 : memory.front().size(0); }

  // A deep copy (tensors cloned, autograd history kept).
  MemoryState clone() const;

  // Copies every tensor to `device` (the GUI and CLI move states between CPU and GPU).
  MemoryState to(const c10::Device& device) const;

  // The tensors detached from autograd (for stepping after a differentiable forward).
  MemoryState detached() const;

  // S = 0 for the given heads (all heads when empty), e.g. the GUI's "reset momentum".
  void reset_momentum(const std::vector<int64_t>& heads = {});

  // name → tensor, for sessions and keyframes; from_map is its inverse.
  std::map<std::string, at::Tensor> to_map() const;
  static MemoryState from_map(const std::map<std::string, at::Tensor>& map);
};

// A mask [H] selecting `heads` (all when empty), on `like`'s device, as `like`'s dtype.
at::Tensor head_mask(const std::vector<int64_t>& heads, int64_t num_heads, const at::Tensor& like);

}  // namespace memscope::model
