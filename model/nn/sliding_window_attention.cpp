#include "model/nn/sliding_window_attention.h"

#include <cmath>

#include "model/nn/rope.h"
#include "model/util/errors.h"

namespace memscope::model {

KvCache KvCache::detached() const { return {k.detach(), v.detach(), positions, next}; }

SlidingWindowAttentionImpl::SlidingWindowAttentionImpl(AttentionOptions options) : options_(options) {
  const int64_t D = options_.d_model;
  if (options_.heads < 1 || D % options_.heads != 0)
    throw UserError("attention: " + std::to_string(options_.heads) + " heads do not divide d_model " +
                    std::to_string(D));
  head_dim_ = D / options_.heads;
  if (head_dim_ % 2 != 0) throw UserError("attention: head dimension " + std::to_string(head_dim_) + " must be even (RoPE)");
  if (options_.window < 1) throw UserError("attention: window must be at least 1");
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  w_q = register_parameter("w_q", torch::randn({D, D}) * scale);
  w_k = register_parameter("w_k", torch::randn({D, D}) * scale);
  w_v = register_parameter("w_v", torch::randn({D, D}) * scale);
  w_o = register_parameter("w_o", torch::randn({D, D}) * scale);
  if (options_.persistent > 0)
    persistent_tokens = register_parameter("persistent_tokens", torch::randn({options_.persistent, D}));
}

KvCache SlidingWindowAttentionImpl::empty_cache(int64_t batch) const {
  const auto opts = w_q.options();
  KvCache c;
  c.k = at::zeros({batch, options_.heads, 0, head_dim_}, opts);
  c.v = at::zeros({batch, options_.heads, 0, head_dim_}, opts);
  c.positions = at::zeros({0}, opts.dtype(at::kLong));
  return c;
}

at::Tensor SlidingWindowAttentionImpl::heads_of(const at::Tensor& x) const {
  return x.reshape({x.size(0), x.size(1), options_.heads, head_dim_}).transpose(1, 2);
}

at::Tensor SlidingWindowAttentionImpl::forward(const at::Tensor& x, KvCache& cache, const at::Tensor& extra) const {
  if (fused_step_applies(x, cache, extra)) return fused_step(x, cache);
  const int64_t B = x.size(0), T = x.size(1), W = options_.window, S = options_.segment;
  const auto long_opts = x.options().dtype(at::kLong);
  // One token after a non-empty cache of consecutive positions: its position is the last key's
  // plus one, computed on the device, so that a CUDA graph of the step (graphed_step.h) does not
  // fix the position it was captured at. Otherwise from the host's count; both give cache.next.
  const bool follows_cache =
      T == 1 && S == 0 && !extra.defined() && cache.positions.defined() && cache.positions.size(0) > 0;
  const at::Tensor pos = follows_cache ? cache.positions.narrow(0, cache.positions.size(0) - 1, 1) + 1
                                       : at::arange(cache.next, cache.next + T, long_opts);

  const RopeAngles angles = rope_angles(pos, head_dim_, options_.rope_base, x.scalar_type());
  at::Tensor q = apply_rope(heads_of(at::matmul(x, w_q.t())), angles);
  std::vector<at::Tensor> ks{cache.k, apply_rope(heads_of(at::matmul(x, w_k.t())), angles)};
  std::vector<at::Tensor> vs{cache.v, heads_of(at::matmul(x, w_v.t()))};
  std::vector<at::Tensor> ps{cache.positions, pos};
  if (extra.defined()) {
    ks.push_back(apply_rope(heads_of(at::matmul(extra, w_k.t())), angles));
    vs.push_back(heads_of(at::matmul(extra, w_v.t())));
    ps.push_back(pos);
  }
  at::Tensor k = at::cat(ks, 2), v = at::cat(vs, 2), key_pos = at::cat(ps, 0);

  // visible[t, j]: key j is at most W−1 tokens behind query t, not ahead, and (MAC) in its segment.
  // A key at a negative position is padding: a cache padded to its full length before the stream
  // has filled it (graphed_step.h), so that a CUDA graph of the step fixes one shape for all tokens.
  at::Tensor qp = pos.unsqueeze(1), kp = key_pos.unsqueeze(0);
  at::Tensor visible = (kp <= qp) & (kp > qp - W) & (kp >= 0);
  if (S > 0) visible = visible & (at::floor_divide(kp, S) == at::floor_divide(qp, S));

  at::Tensor keys = k, values = v;
  if (persistent_tokens.defined()) {
    // Persistent tokens carry no position: every query sees them, whatever its window.
    const at::Tensor p = persistent_tokens.unsqueeze(0).expand({B, options_.persistent, options_.d_model});
    keys = at::cat({heads_of(at::matmul(p, w_k.t())), k}, 2);
    values = at::cat({heads_of(at::matmul(p, w_v.t())), v}, 2);
    visible = at::cat({at::ones({T, options_.persistent}, visible.options()), visible}, 1);
  }
  at::Tensor scores = at::matmul(q, keys.transpose(-1, -2)) / std::sqrt(static_cast<double>(head_dim_));
  scores = scores.masked_fill(~visible, -std::numeric_limits<double>::infinity());
  at::Tensor out = at::matmul(at::softmax(scores, -1), values);  // [B,H,T,d]
  out = out.transpose(1, 2).reshape({B, T, options_.d_model});

  // Keep only what a later query can see: positions ≥ next−W+1 (and in the next token's segment).
  const int64_t next = cache.next + T;
  if (S == 0 && !extra.defined()) {
    // The cache holds consecutive positions, one key each, ending at next−1: what stays is the
    // last W−1 of them, a slice (no mask, no nonzero(), no gather on the step path).
    const int64_t keep = std::min<int64_t>(key_pos.size(0), W - 1);
    const int64_t from = key_pos.size(0) - keep;
    cache.k = k.narrow(2, from, keep);
    cache.v = v.narrow(2, from, keep);
    cache.positions = key_pos.narrow(0, from, keep);
  } else {
    at::Tensor keep = key_pos > next - W;
    if (S > 0) keep = keep & (at::floor_divide(key_pos, S) == next / S);
    const at::Tensor index = keep.nonzero().squeeze(1);
    cache.k = k.index_select(2, index);
    cache.v = v.index_select(2, index);
    cache.positions = key_pos.index_select(0, index);
  }
  cache.next = next;
  return at::matmul(out, w_o.t());
}

}  // namespace memscope::model
