// The chunkwise form (SPEC §9) of the linear rules with an l2 bias and a window of one token,
// Titans' gd-momentum and DeltaNet's dgd, as one autograd function whose backward is written out
// (issue 20: a training step faster than eager PyTorch). Autograd through the ATen spelling of the
// dual form (chunkwise_forward.cpp) records ~60 small ops a chunk, each with its own backward; at
// the demos' sizes (d = 16, chunks of 4) those calls, not the arithmetic, are the training step.
// Here one loop per head does a token in a few passes over its d_v×d_φ matrices, reading the
// projections where project() left them (token-major, no transposed copies).
//
// Token t of a chunk whose gradient point is M̄ (the memory at the chunk's start), SPEC §4-§5:
//   e = M̄ φ_t − v_t,   ψ = w_t e,   ρ = min(1, clip / (‖ψ‖ ‖φ_t‖)),   ψ̃ = ρ ψ,   g = ψ̃ φ_tᵀ
//   S_t = β_t S_{t−1} + η_t g,   M_t = α_t M_{t−1} − S_t        (dgd: M_t = α_t M_{t−1} − η_t g)
//   y_t = M_t q_t                                                (read before the write: M_{t−1} q_t)
// Every ψ of a chunk comes from M̄, so the forward computes them all first and then writes the
// chunk's tokens four at a time, one pass over M and S for the four. It keeps (M, S) every
// `segment` tokens. The backward re-runs one segment at a time,
// keeping its per-token states, and walks it backwards with the adjoints
//   dM_t += dy_t q_tᵀ,  dα_t = ⟨dM_t, M_{t−1}⟩,  dS_t −= dM_t,  dβ_t = ⟨dS_t, S_{t−1}⟩,
//   dη_t = ⟨dS_t, g⟩,  dψ̃ = η_t dS_t φ_t,  dφ_t += η_t dS_tᵀ ψ̃,  the clip's chain rule,
//   dw_t = ⟨dψ, e⟩,  de = w_t dψ,  dM̄ += de φ_tᵀ,  dφ_t += M̄ᵀ de,  dv_t = −de,
//   dM_{t−1} = α_t dM_t,  dS_{t−1} = β_t dS_t,
// and dM̄ joins dM at the chunk's start. tests/model/test_fused_linear_chunkwise.cpp checks the
// values against the ATen form and the gradients against autograd through it, and
// test_memory_gradients.cpp's finite-difference gradcheck runs titans-lmm through it.
#include "model/memory/fused_linear_chunkwise.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "model/util/simd_clones.h"

namespace memscope::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Tokens between the forward's checkpoints, in whole chunks. The backward re-runs one segment
// and keeps its per-token M and S, so a segment should stay in L2 (256 KB): walked back from
// memory, they cost more than the arithmetic. At least 16 tokens, so that the forward's copies
// stay a few percent of its work.
constexpr int64_t kSegmentBytes = 256 * 1024, kMinSegmentTokens = 16;
int64_t segment_length(int64_t chunk, int64_t dd, int64_t element_size) {
  const int64_t tokens = std::max(kMinSegmentTokens, kSegmentBytes / (2 * dd * element_size));
  return chunk * ((tokens + chunk - 1) / chunk);
}

// One head's per-token rows.
template <typename T>
struct HeadRows {
  const T *phi, *q, *v, *w, *alpha, *eta, *beta;
};

// The inputs are token-major, [B,T,H,…] as the layer's projection makes them: a head's rows are
// `heads` rows apart.
template <typename T>
struct Sizes {
  int64_t tokens, heads, dv, dk;
  int64_t dd() const { return dv * dk; }
  int64_t key_stride() const { return heads * dk; }    // φ and q rows
  int64_t value_stride() const { return heads * dv; }  // v and y rows
};

template <typename T>
HeadRows<T> rows_at(const HeadRows<T>& all, int64_t t, const Sizes<T>& n) {
  const int64_t k = t * n.key_stride(), g = t * n.heads;
  return {all.phi + k, all.q + k, all.v + t * n.value_stride(), all.w + g, all.alpha + g, all.eta + g, all.beta + g};
}

// e = M̄ φ − v and ψ = w e into e and psi; returns ρ and fills the norms the clip's backward needs
// (SPEC §4 l2 bias; the factor is inner_clip.cpp's).
template <typename T>
struct Clip {
  T rho = 1, norm_sq = 0, psi_sq = 0, phi_sq = 0;
  bool clipped = false;
};

template <typename T>
[[gnu::always_inline]] inline Clip<T> inner_gradient(const T* mbar, const T* phi, const T* v, T w, const Sizes<T>& n,
                                                     double clip, T* e, T* psi) {
  Clip<T> c;
  for (int64_t j = 0; j < n.dk; ++j) c.phi_sq += phi[j] * phi[j];
  for (int64_t i = 0; i < n.dv; ++i) {
    const T* row = mbar + i * n.dk;
    T acc = 0;
    for (int64_t j = 0; j < n.dk; ++j) acc += row[j] * phi[j];
    e[i] = acc - v[i];
    psi[i] = w * e[i];
    c.psi_sq += psi[i] * psi[i];
  }
  c.norm_sq = c.psi_sq * c.phi_sq;
  if (clip > 0) {
    const T factor = static_cast<T>(clip) / std::sqrt(std::max(c.norm_sq, static_cast<T>(1e-30)));
    if (factor < 1) {
      c.rho = factor;
      c.clipped = true;
    }
  }
  return c;
}

// The rule's two switches as template arguments, so that the row loops below have no branch
// inside and vectorise (with the __restrict rows, which never overlap).
template <bool kMomentum, bool kReadAfter>
struct Rule {
  static constexpr bool momentum = kMomentum, read_after = kReadAfter;
};

// One row of one token's write, S ← β S + u φ and M ← α M − S (dgd: M ← α M − u φ), u = η ρ ψ_i,
// in place (the backward's re-run, which needs no read).
template <typename T, typename R>
[[gnu::always_inline]] inline void write_row(int64_t dk, T* __restrict m, T* __restrict s, const T* __restrict phi,
                                             T alpha, T beta, T u) {
  for (int64_t j = 0; j < dk; ++j) {
    if (R::momentum) {
      s[j] = beta * s[j] + u * phi[j];
      m[j] = alpha * m[j] - s[j];
    } else {
      m[j] = alpha * m[j] - u * phi[j];
    }
  }
}

// One token's write over all rows, after copying M (and S) from before it into m_prev (s_prev).
template <typename T, typename R>
[[gnu::always_inline]] inline void write_keeping(T* m, T* s, const T* psi, T rho, const HeadRows<T>& r,
                                                 const Sizes<T>& n, T* m_prev, T* s_prev) {
  const T alpha = *r.alpha, eta = *r.eta, beta = *r.beta;
  for (int64_t i = 0; i < n.dv; ++i) {
    T* mr = m + i * n.dk;
    T* sr = s + i * n.dk;
    std::copy(mr, mr + n.dk, m_prev + i * n.dk);
    if (R::momentum) std::copy(sr, sr + n.dk, s_prev + i * n.dk);
    write_row<T, R>(n.dk, mr, sr, r.phi, alpha, beta, eta * (rho * psi[i]));
  }
}

// G tokens' writes and reads in one pass over M and S, for tokens of one chunk (their ψ all come
// from the chunk-start M̄, so they are known before the first write): each element of M and S is
// loaded and stored once for the G of them, not G times. `phis` and `qs` are the tokens' φ and q
// rows side by side, `us` their u = η ρ ψ, `ys` where their reads go (M q before or after each
// write). Per element the arithmetic is write_row's, token after token.
template <typename T, typename R, int G>
[[gnu::always_inline]] inline void write_group(const Sizes<T>& n, T* __restrict m, T* __restrict s,
                                               const T* __restrict phis, const T* __restrict qs, const T* alphas,
                                               const T* betas, const T* us, T* const* ys) {
  const int64_t dk = n.dk;
  for (int64_t i = 0; i < n.dv; ++i) {
    T* __restrict mr = m + i * dk;
    T* __restrict sr = s + i * dk;
    T u[G], alpha[G], beta[G], read[G];
    for (int g = 0; g < G; ++g) {
      u[g] = us[g * n.dv + i];
      alpha[g] = alphas[g];
      beta[g] = betas[g];
      read[g] = 0;
    }
    for (int64_t j = 0; j < dk; ++j) {
      T mv = mr[j], sv = R::momentum ? sr[j] : T(0);
      for (int g = 0; g < G; ++g) {
        const T phi = phis[g * dk + j], q = qs[g * dk + j];
        if (!R::read_after) read[g] += mv * q;
        if (R::momentum) {
          sv = beta[g] * sv + u[g] * phi;
          mv = alpha[g] * mv - sv;
        } else {
          mv = alpha[g] * mv - u[g] * phi;
        }
        if (R::read_after) read[g] += mv * q;
      }
      mr[j] = mv;
      if (R::momentum) sr[j] = sv;
    }
    for (int g = 0; g < G; ++g) ys[g][i] = read[g];
  }
}

// Tokens [t0, t1) of one chunk, whose u are in `us`: groups of four, then one at a time.
template <typename T, typename R>
[[gnu::always_inline]] inline void write_chunk(const HeadRows<T>& head, const Sizes<T>& n, int64_t t0, int64_t t1,
                                               T* m, T* s, const T* us, T* y, T* phis, T* qs) {
  constexpr int kGroup = 4;
  int64_t t = t0;
  auto gather = [&](int count, T* alphas, T* betas, T** ys) {
    for (int g = 0; g < count; ++g) {
      const HeadRows<T> r = rows_at(head, t + g, n);
      std::copy(r.phi, r.phi + n.dk, phis + g * n.dk);
      std::copy(r.q, r.q + n.dk, qs + g * n.dk);
      alphas[g] = *r.alpha;
      betas[g] = *r.beta;
      ys[g] = y + (t + g) * n.value_stride();
    }
  };
  T alphas[kGroup], betas[kGroup];
  T* ys[kGroup];
  for (; t + kGroup <= t1; t += kGroup) {
    gather(kGroup, alphas, betas, ys);
    write_group<T, R, kGroup>(n, m, s, phis, qs, alphas, betas, us + (t - t0) * n.dv, ys);
  }
  for (; t < t1; ++t) {
    gather(1, alphas, betas, ys);
    write_group<T, R, 1>(n, m, s, phis, qs, alphas, betas, us + (t - t0) * n.dv, ys);
  }
}

template <typename T, typename R>
[[gnu::always_inline]] inline void forward_head(const HeadRows<T>& head, const Sizes<T>& n,
                                                const LinearChunkwiseOptions& o, const T* m0, const T* s0, T* y, T* m,
                                                T* s, T* anchor, T* checkpoint_m, T* checkpoint_s) {
  const int64_t dd = n.dd(), segment = segment_length(o.chunk, n.dd(), sizeof(T));
  std::copy(m0, m0 + dd, m);
  std::copy(s0, s0 + dd, s);
  const int64_t chunk_rows = std::min(o.chunk, n.tokens);
  std::vector<T> e(n.dv), psi(n.dv), us(chunk_rows * n.dv), phis(4 * n.dk), qs(4 * n.dk);
  for (int64_t t0 = 0; t0 < n.tokens; t0 += o.chunk) {
    const int64_t t1 = std::min(n.tokens, t0 + o.chunk);
    if (t0 % segment == 0) {  // segments are whole chunks
      std::copy(m, m + dd, checkpoint_m + (t0 / segment) * dd);
      std::copy(s, s + dd, checkpoint_s + (t0 / segment) * dd);
    }
    if (t1 == n.tokens) std::copy(m, m + dd, anchor);  // the last chunk's M̄
    // Every token's ψ at the chunk-start M̄ (= M now), before any of the chunk's writes.
    for (int64_t t = t0; t < t1; ++t) {
      const HeadRows<T> r = rows_at(head, t, n);
      const Clip<T> c = inner_gradient(m, r.phi, r.v, *r.w, n, o.clip, e.data(), psi.data());
      T* u = us.data() + (t - t0) * n.dv;
      for (int64_t i = 0; i < n.dv; ++i) u[i] = *r.eta * (c.rho * psi[i]);
    }
    write_chunk<T, R>(head, n, t0, t1, m, s, us.data(), y, phis.data(), qs.data());
  }
}

// Where one head's input gradients go: rows like HeadRows.
template <typename T>
struct HeadGrads {
  T *phi, *q, *v, *w, *alpha, *eta, *beta;
};

// The adjoints that one row of M and S hand through the read, the retention and the momentum:
// dM_t += dy_i q (read after the write, which needs M_t's row, rebuilt), dα += ⟨dM_t, M_{t−1}⟩,
// dS_t −= dM_t, dβ += ⟨dS_t, S_{t−1}⟩, u_i = (dS_t φ)_i, r += dS_t,i ψ̃_i, dq += M_t,iᵀ dy_i; then
// dM and dS become the adjoints of M_{t−1} and S_{t−1}.
template <typename T, typename R>
[[gnu::always_inline]] inline void backward_row(int64_t dk, const T* __restrict mp, const T* __restrict sp,
                                                const T* __restrict phi, const T* __restrict q, T* __restrict dM,
                                                T* __restrict dS, T* __restrict dq, T* __restrict rv, T alpha, T beta,
                                                T ui, T dyi, T psi_t, T& d_alpha, T& d_beta, T& row_u) {
  T a = 0, b = 0, u = 0;
  if constexpr (R::momentum) {
    for (int64_t j = 0; j < dk; ++j) {
      T dm = dM[j];
      if constexpr (R::read_after) {
        dq[j] += (alpha * mp[j] - (beta * sp[j] + ui * phi[j])) * dyi;  // M_t q_t's adjoint, M_t rebuilt
        dm += dyi * q[j];
      } else {
        dq[j] += mp[j] * dyi;
      }
      a += dm * mp[j];
      const T dst = dS[j] - dm;  // the adjoint of S_t
      b += dst * sp[j];
      dS[j] = beta * dst;
      u += dst * phi[j];
      rv[j] += dst * psi_t;
      dM[j] = R::read_after ? alpha * dm : alpha * dm + dyi * q[j];
    }
  } else {
    // dgd: M_t = α M_{t−1} − η g, so the adjoint of η g is −dM_t (no S to carry). GCC does not
    // vectorise this loop once inlined unless told that its rows do not overlap (they never do).
#pragma GCC ivdep
    for (int64_t j = 0; j < dk; ++j) {
      T dm = dM[j];
      if constexpr (R::read_after) {
        dq[j] += (alpha * mp[j] - ui * phi[j]) * dyi;
        dm += dyi * q[j];
      } else {
        dq[j] += mp[j] * dyi;
      }
      a += dm * mp[j];
      u -= dm * phi[j];
      rv[j] -= dm * psi_t;
      dM[j] = R::read_after ? alpha * dm : alpha * dm + dyi * q[j];
    }
  }
  d_alpha += a;
  d_beta += b;
  row_u = u;
}

// ψ's adjoint into one row of M̄'s and into φ's: dφ += M̄_iᵀ de_i, dM̄_i += de_i φ; at the chunk's
// first token M̄ is M_{t−1}, so the row's dM̄ joins dM and starts again at zero.
template <typename T, bool kChunkStart>
[[gnu::always_inline]] inline void gradient_point_row(int64_t dk, const T* __restrict mb, const T* __restrict phi,
                                                      T* __restrict dMbar, T* __restrict dM, T* __restrict dphi,
                                                      T de) {
  for (int64_t j = 0; j < dk; ++j) {
    dphi[j] += mb[j] * de;
    const T total = dMbar[j] + de * phi[j];
    if (kChunkStart) {
      dM[j] += total;
      dMbar[j] = 0;
    } else {
      dMbar[j] = total;
    }
  }
}

// The adjoints of one token (the header's list) in two passes over the rows.
template <typename T, typename R>
[[gnu::always_inline]] inline void backward_token(const T* mp, const T* sp, const T* mb, const T* e, const T* psi,
                                                  const Clip<T>& c, const HeadRows<T>& r, const T* dy,
                                                  const HeadGrads<T>& grad, int64_t t, bool chunk_start,
                                                  const Sizes<T>& n, T* dM, T* dS, T* dMbar, T* u, T* rv) {
  const int64_t dv = n.dv, dk = n.dk;
  const T alpha = *r.alpha, eta = *r.eta, beta = *r.beta, w = *r.w;
  const T* phi = r.phi;
  T* dphi = grad.phi + t * n.key_stride();
  T* dq = grad.q + t * n.key_stride();
  std::fill(dq, dq + dk, T(0));
  std::fill(rv, rv + dk, T(0));
  T d_alpha = 0, d_beta = 0, d_eta = 0;
  for (int64_t i = 0; i < dv; ++i) {
    const T psi_t = c.rho * psi[i];
    backward_row<T, R>(dk, mp + i * dk, sp + i * dk, phi, r.q, dM + i * dk, dS + i * dk, dq, rv, alpha, beta,
                       eta * psi_t, dy[i], psi_t, d_alpha, d_beta, u[i]);
    d_eta += psi_t * u[i];
  }
  // ψ̃ = ρ(‖ψ‖²‖φ‖²) ψ; where the bound bites, ρ = clip·(‖ψ‖²‖φ‖²)^(−1/2), so dρ/d‖·‖² = −ρ/(2‖·‖²).
  T d_norm_sq = 0;
  if (c.clipped) {
    T d_rho = 0;
    for (int64_t i = 0; i < dv; ++i) d_rho += eta * u[i] * psi[i];
    d_norm_sq = d_rho * (-c.rho / (2 * c.norm_sq));
  }
  for (int64_t j = 0; j < dk; ++j) dphi[j] = eta * rv[j] + 2 * d_norm_sq * c.psi_sq * phi[j];
  // ψ = w (M̄ φ − v).
  T d_w = 0;
  for (int64_t i = 0; i < dv; ++i) {
    const T d_psi = c.rho * eta * u[i] + 2 * d_norm_sq * c.phi_sq * psi[i];
    d_w += d_psi * e[i];
    const T de = w * d_psi;
    grad.v[t * n.value_stride() + i] = -de;
    if (chunk_start)
      gradient_point_row<T, true>(dk, mb + i * dk, phi, dMbar + i * dk, dM + i * dk, dphi, de);
    else
      gradient_point_row<T, false>(dk, mb + i * dk, phi, dMbar + i * dk, dM + i * dk, dphi, de);
  }
  const int64_t g = t * n.heads;
  grad.w[g] = d_w;
  grad.alpha[g] = d_alpha;
  grad.eta[g] = d_eta;
  grad.beta[g] = d_beta;
}

template <typename T, typename R>
[[gnu::always_inline]] inline void backward_head(const HeadRows<T>& head, const HeadGrads<T>& grad, const Sizes<T>& n,
                                                 const LinearChunkwiseOptions& o, const T* checkpoint_m,
                                                 const T* checkpoint_s, const T* dy, const T* d_m_end,
                                                 const T* d_s_end, const T* d_anchor, T* d_m0, T* d_s0) {
  const int64_t dd = n.dd(), segment = segment_length(o.chunk, n.dd(), sizeof(T)), dv = n.dv;
  // One segment's re-run: M_{t−1}, S_{t−1}, each chunk's M̄, and each token's e, ψ and clip.
  std::vector<T> m_prev(segment * dd), s_prev(R::momentum ? segment * dd : dd), mbars(segment / o.chunk * dd);
  // dgd keeps no S: its one slot is never read.
  auto s_slot = [&](int64_t k) { return s_prev.data() + (R::momentum ? k * dd : 0); };
  std::vector<T> e(segment * dv), psi(segment * dv);
  std::vector<Clip<T>> clips(segment);
  std::vector<T> dM(dd, 0), dS(dd, 0), dMbar(dd, 0), m(dd), s(dd), u(dv), rv(n.dk);
  if (d_m_end) std::copy(d_m_end, d_m_end + dd, dM.begin());
  if (d_s_end) std::copy(d_s_end, d_s_end + dd, dS.begin());
  if (d_anchor) std::copy(d_anchor, d_anchor + dd, dMbar.begin());  // the last chunk's M̄

  const int64_t segments = (n.tokens + segment - 1) / segment;
  for (int64_t seg = segments - 1; seg >= 0; --seg) {
    const int64_t t0 = seg * segment, t1 = std::min(n.tokens, t0 + segment);
    std::copy(checkpoint_m + seg * dd, checkpoint_m + (seg + 1) * dd, m.begin());
    std::copy(checkpoint_s + seg * dd, checkpoint_s + (seg + 1) * dd, s.begin());
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t k = t - t0;
      if (t % o.chunk == 0) std::copy(m.begin(), m.end(), mbars.begin() + k / o.chunk * dd);
      const HeadRows<T> r = rows_at(head, t, n);
      clips[k] = inner_gradient(mbars.data() + k / o.chunk * dd, r.phi, r.v, *r.w, n, o.clip, e.data() + k * dv,
                                psi.data() + k * dv);
      write_keeping<T, R>(m.data(), s.data(), psi.data() + k * dv, clips[k].rho, r, n, m_prev.data() + k * dd,
                          s_slot(k));
    }
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const int64_t k = t - t0;
      backward_token<T, R>(m_prev.data() + k * dd, s_slot(k),
                           mbars.data() + k / o.chunk * dd, e.data() + k * dv, psi.data() + k * dv, clips[k],
                           rows_at(head, t, n), dy + t * n.value_stride(), grad, t, t % o.chunk == 0, n, dM.data(), dS.data(),
                           dMbar.data(), u.data(), rv.data());
    }
  }
  std::copy(dM.begin(), dM.end(), d_m0);
  std::copy(dS.begin(), dS.end(), d_s0);
}

// The loops are built per instruction set for float32 (simd_clones.h), once for float64. The
// rule's switches are branched on here, without a lambda: a lambda's body would be a function of
// its own, built for the portable target only.
template <typename T>
[[gnu::always_inline]] inline void forward_any(const HeadRows<T>& head, const Sizes<T>& n,
                                               const LinearChunkwiseOptions& o, const T* m0, const T* s0, T* y, T* m,
                                               T* s, T* anchor, T* checkpoint_m, T* checkpoint_s) {
  if (o.momentum && o.read_after)
    forward_head<T, Rule<true, true>>(head, n, o, m0, s0, y, m, s, anchor, checkpoint_m, checkpoint_s);
  else if (o.momentum)
    forward_head<T, Rule<true, false>>(head, n, o, m0, s0, y, m, s, anchor, checkpoint_m, checkpoint_s);
  else if (o.read_after)
    forward_head<T, Rule<false, true>>(head, n, o, m0, s0, y, m, s, anchor, checkpoint_m, checkpoint_s);
  else
    forward_head<T, Rule<false, false>>(head, n, o, m0, s0, y, m, s, anchor, checkpoint_m, checkpoint_s);
}
template <typename T>
[[gnu::always_inline]] inline void backward_any(const HeadRows<T>& head, const HeadGrads<T>& grad, const Sizes<T>& n,
                                                const LinearChunkwiseOptions& o, const T* checkpoint_m,
                                                const T* checkpoint_s, const T* dy, const T* d_m_end, const T* d_s_end,
                                                const T* d_anchor, T* d_m0, T* d_s0) {
  if (o.momentum && o.read_after)
    backward_head<T, Rule<true, true>>(head, grad, n, o, checkpoint_m, checkpoint_s, dy, d_m_end, d_s_end, d_anchor,
                                       d_m0, d_s0);
  else if (o.momentum)
    backward_head<T, Rule<true, false>>(head, grad, n, o, checkpoint_m, checkpoint_s, dy, d_m_end, d_s_end, d_anchor,
                                        d_m0, d_s0);
  else if (o.read_after)
    backward_head<T, Rule<false, true>>(head, grad, n, o, checkpoint_m, checkpoint_s, dy, d_m_end, d_s_end, d_anchor,
                                        d_m0, d_s0);
  else
    backward_head<T, Rule<false, false>>(head, grad, n, o, checkpoint_m, checkpoint_s, dy, d_m_end, d_s_end,
                                         d_anchor, d_m0, d_s0);
}
MEMSCOPE_SIMD_CLONES void forward_head_f32(const HeadRows<float>& head, const Sizes<float>& n,
                                           const LinearChunkwiseOptions& o, const float* m0, const float* s0,
                                           float* y, float* m, float* s, float* anchor, float* checkpoint_m,
                                           float* checkpoint_s) {
  forward_any(head, n, o, m0, s0, y, m, s, anchor, checkpoint_m, checkpoint_s);
}
MEMSCOPE_SIMD_CLONES void backward_head_f32(const HeadRows<float>& head, const HeadGrads<float>& grad,
                                            const Sizes<float>& n, const LinearChunkwiseOptions& o,
                                            const float* checkpoint_m, const float* checkpoint_s, const float* dy,
                                            const float* d_m_end, const float* d_s_end, const float* d_anchor,
                                            float* d_m0, float* d_s0) {
  backward_any(head, grad, n, o, checkpoint_m, checkpoint_s, dy, d_m_end, d_s_end, d_anchor, d_m0, d_s0);
}
template <typename T>
void run_forward_head(const HeadRows<T>& head, const Sizes<T>& n, const LinearChunkwiseOptions& o, const T* m0,
                      const T* s0, T* y, T* m, T* s, T* anchor, T* checkpoint_m, T* checkpoint_s) {
  if constexpr (std::is_same_v<T, float>)
    forward_head_f32(head, n, o, m0, s0, y, m, s, anchor, checkpoint_m, checkpoint_s);
  else
    forward_any(head, n, o, m0, s0, y, m, s, anchor, checkpoint_m, checkpoint_s);
}
template <typename T>
void run_backward_head(const HeadRows<T>& head, const HeadGrads<T>& grad, const Sizes<T>& n,
                       const LinearChunkwiseOptions& o, const T* checkpoint_m, const T* checkpoint_s, const T* dy,
                       const T* d_m_end, const T* d_s_end, const T* d_anchor, T* d_m0, T* d_s0) {
  if constexpr (std::is_same_v<T, float>)
    backward_head_f32(head, grad, n, o, checkpoint_m, checkpoint_s, dy, d_m_end, d_s_end, d_anchor, d_m0, d_s0);
  else
    backward_any(head, grad, n, o, checkpoint_m, checkpoint_s, dy, d_m_end, d_s_end, d_anchor, d_m0, d_s0);
}

// Where head bh = b·H + h starts in a token-major [B,T,H,…] tensor with `width` numbers a head.
template <typename T>
T* head_start(const at::Tensor& t, int64_t bh, const Sizes<T>& n, int64_t width) {
  if (!t.defined()) return nullptr;
  const int64_t b = bh / n.heads, h = bh % n.heads;
  return t.data_ptr<T>() + (b * n.tokens * n.heads + h) * width;
}

// The per-token tensors in HeadRows' order: φ, q, v, w, α, η, β.
template <typename T, typename Rows>
Rows head_rows(const std::vector<at::Tensor>& in, int64_t bh, const Sizes<T>& n) {
  return {head_start(in[0], bh, n, n.dk), head_start(in[1], bh, n, n.dk), head_start(in[2], bh, n, n.dv),
          head_start(in[3], bh, n, 1),    head_start(in[4], bh, n, 1),    head_start(in[5], bh, n, 1),
          head_start(in[6], bh, n, 1)};
}

// The per-head state tensors [B,H,…] (and the checkpoints [B·H,segments,…]): one block a head.
template <typename T>
T* state_of(const at::Tensor& t, int64_t bh, int64_t block) {
  return t.defined() ? t.data_ptr<T>() + bh * block : nullptr;
}

struct LinearChunkwiseFunction : public torch::autograd::Function<LinearChunkwiseFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& m0_in, const at::Tensor& s0_in,
                               const at::Tensor& phi_in, const at::Tensor& q_in, const at::Tensor& v_in,
                               const at::Tensor& w_in, const at::Tensor& alpha_in, const at::Tensor& eta_in,
                               const at::Tensor& beta_in, int64_t chunk, double clip, bool momentum,
                               bool read_after) {
    const LinearChunkwiseOptions o{chunk, clip, momentum, read_after};
    const at::Tensor m0 = m0_in.contiguous(), s0 = s0_in.contiguous();
    const std::vector<at::Tensor> rows{phi_in.contiguous(), q_in.contiguous(),     v_in.contiguous(),
                                       w_in.contiguous(),   alpha_in.contiguous(), eta_in.contiguous(),
                                       beta_in.contiguous()};
    const int64_t B = phi_in.size(0), T = phi_in.size(1), H = phi_in.size(2);
    const int64_t dv = v_in.size(3), dk = phi_in.size(3), BH = B * H;
    const int64_t segment = segment_length(chunk, dv * dk, m0.element_size());
    const int64_t segments = (T + segment - 1) / segment;
    at::Tensor y = at::empty({B, T, H, dv}, phi_in.options());
    at::Tensor m_end = at::empty({B, H, dv, dk}, m0.options()), s_end = at::empty_like(m_end);
    at::Tensor anchor = at::empty_like(m_end);
    at::Tensor checkpoint_m = at::empty({BH, segments, dv, dk}, m0.options());
    at::Tensor checkpoint_s = at::empty_like(checkpoint_m);
    AT_DISPATCH_FLOATING_TYPES(m0.scalar_type(), "fused_linear_chunkwise", [&] {
      using T_ = scalar_t;
      const Sizes<T_> n{T, H, dv, dk};
      const int64_t dd = n.dd();
      at::parallel_for(0, BH, 1, [&](int64_t begin, int64_t end) {
        for (int64_t bh = begin; bh < end; ++bh)
          run_forward_head(head_rows<T_, HeadRows<T_>>(rows, bh, n), n, o, state_of<T_>(m0, bh, dd),
                           state_of<T_>(s0, bh, dd), head_start<T_>(y, bh, n, dv), state_of<T_>(m_end, bh, dd),
                           state_of<T_>(s_end, bh, dd), state_of<T_>(anchor, bh, dd),
                           state_of<T_>(checkpoint_m, bh, segments * dd), state_of<T_>(checkpoint_s, bh, segments * dd));
      });
    });
    std::vector<at::Tensor> saved = rows;
    saved.push_back(checkpoint_m);
    saved.push_back(checkpoint_s);
    ctx->save_for_backward(saved);
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["clip"] = clip;
    ctx->saved_data["momentum"] = momentum;
    ctx->saved_data["read_after"] = read_after;
    if (!momentum) ctx->mark_non_differentiable({s_end});
    return {y, m_end, s_end, anchor};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    // The loops below are not themselves differentiable: a second derivative would come out
    // silently missing, so a double backward is refused.
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "the fused chunkwise form has no double backward (create_graph); "
                "MemoryLayerImpl::set_fused_step(false) gives the ATen form, which has one");
    const LinearChunkwiseOptions o{ctx->saved_data["chunk"].toInt(), ctx->saved_data["clip"].toDouble(),
                                   ctx->saved_data["momentum"].toBool(), ctx->saved_data["read_after"].toBool()};
    const variable_list saved = ctx->get_saved_variables();
    const std::vector<at::Tensor> rows(saved.begin(), saved.begin() + 7);
    const at::Tensor &checkpoint_m = saved[7], &checkpoint_s = saved[8];
    const at::Tensor& phi = rows[0];
    const int64_t B = phi.size(0), T = phi.size(1), H = phi.size(2);
    const int64_t dv = rows[2].size(3), dk = phi.size(3), BH = B * H;
    const int64_t segments = checkpoint_m.size(1);
    auto given = [&](size_t i) { return grad_out[i].defined() ? grad_out[i].contiguous() : at::Tensor(); };
    at::Tensor dy = given(0), d_m_end = given(1), d_s_end = o.momentum ? given(2) : at::Tensor(), d_anchor = given(3);
    if (!dy.defined()) dy = at::zeros({B, T, H, dv}, phi.options());
    at::Tensor d_m0 = at::empty({B, H, dv, dk}, phi.options()), d_s0 = at::empty_like(d_m0);
    std::vector<at::Tensor> d_rows;
    for (const auto& r : rows) d_rows.push_back(at::empty_like(r));
    AT_DISPATCH_FLOATING_TYPES(phi.scalar_type(), "fused_linear_chunkwise_backward", [&] {
      using T_ = scalar_t;
      const Sizes<T_> n{T, H, dv, dk};
      const int64_t dd = n.dd();
      at::parallel_for(0, BH, 1, [&](int64_t begin, int64_t end) {
        for (int64_t bh = begin; bh < end; ++bh)
          run_backward_head(head_rows<T_, HeadRows<T_>>(rows, bh, n), head_rows<T_, HeadGrads<T_>>(d_rows, bh, n), n,
                            o, state_of<T_>(checkpoint_m, bh, segments * dd),
                            state_of<T_>(checkpoint_s, bh, segments * dd), head_start<T_>(dy, bh, n, dv),
                            state_of<T_>(d_m_end, bh, dd), state_of<T_>(d_s_end, bh, dd),
                            state_of<T_>(d_anchor, bh, dd), state_of<T_>(d_m0, bh, dd), state_of<T_>(d_s0, bh, dd));
      });
    });
    if (!o.momentum) d_rows[6] = at::Tensor();  // β is not read
    return {d_m0, d_s0, d_rows[0], d_rows[1], d_rows[2], d_rows[3], d_rows[4], d_rows[5], d_rows[6],
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

LinearChunkwiseOutputs fused_linear_chunkwise(const LinearChunkwiseInputs& in, const LinearChunkwiseOptions& options) {
  TORCH_CHECK(options.chunk >= 1, "fused_linear_chunkwise: chunk must be at least 1, got ", options.chunk);
  TORCH_CHECK(in.phi.dim() == 4 && in.phi.size(1) >= 1, "fused_linear_chunkwise: phi must be [B,T,H,d], T >= 1");
  // The state may be one M_0 for every sequence (broadcast); the loops want one per head.
  const auto state_sizes = std::vector<int64_t>{in.phi.size(0), in.phi.size(2), in.v.size(3), in.phi.size(3)};
  const variable_list out =
      LinearChunkwiseFunction::apply(in.m0.expand(state_sizes), in.s0.expand(state_sizes), in.phi, in.q, in.v, in.weight, in.alpha, in.eta, in.beta,
                                     options.chunk, options.clip, options.momentum, options.read_after);
  return {out[0], out[1], out[2], out[3]};
}

}  // namespace memscope::model
