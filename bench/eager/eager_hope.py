#!/usr/bin/python3
"""HOPE's two memories (SPEC §7) in eager PyTorch, as a researcher trains them: the self-modifying
memory in its chunkwise form (SPEC §9) and the continuum memory system (CMS). The baseline for
memscope's HOPE training step (model/memory/self_modifying_chunkwise.cpp, continuum_memory.cpp),
used by bench/eager/eager_lm_train.py for checkpoints with model.block = "hope"; the same math, so
that the two compare: the same chunking, gates, clip, conv, targets and auxiliary loss. SelfModStep
and CmsStep, at the end, are the two token by token, the baseline for memscope's debugger step
(bench/eager/eager_lm.py's EagerHopeLM).

Every memory is the MLP memory of SPEC §3, M(z) = z + LN(W_1 GELU(W_2 z)) (W_1 [d,4d], W_2 [4d,d],
exact erf GELU, LN's affine outer), with the inner loss l = 1/2 |M(z) - target|^2 / d. For one
input z its gradient is rank 1: grad W_1 = do a^T, grad W_2 = dh z^T with a = GELU(W_2 z) and
dh = dl/dh, do = dl/do; inner_factors gets dh and do for a whole stack of tokens from one
torch.autograd.grad to the activations with create_graph (as eager_mlp_memory.key_factors), so the
outer backward goes through them; the per-token clip min(1, clip/|g_t|) takes
|g_t|^2 = |do|^2 |a|^2 + |dh|^2 |z|^2 without building g_t.

selfmod_chunkwise, per block, x [B,T,d] (the normed residual stream): the five memories M_k, M_v,
M_eta, M_alpha and M stacked on a leading axis (W_1 [5,B,d,4d], W_2 [5,B,4d,d]); q = normalize(conv(W_q x))
over the whole sequence at once (q is static). Then per chunk of `chunk` tokens from the sequence
start, every read that feeds a write at the chunk-start memories, all tokens of the chunk in each op:
    k = normalize(conv(M_k(x))), v = conv(M_v(x))         (one batched pass of the four projection
                                                           memories; the conv carries 3 tokens)
    eta = max_lr sigmoid(M_eta(x) + b_eta), alpha = sigmoid(M_alpha(x) + b_alpha)
                                                          (model.hope.shared_gates: of the logits' mean)
    targets sg(M_box(v)) for the four, v for M;  one pass of all five at k and its factors dh, do
    aux += mean (M(k) - sg v)^2 + mean (sg M(k) - v)^2   (at the chunk-start M)
    the dgd writes W_j = W_{j-1} p_j - eta_j grad_j, p_j = alpha_j - eta_j k_j^2 per feature (the
    projections write with self_lr_scale eta), unrolled over the chunk:
        W_end = P_n W_s - sum_i eta_i D[n,i] grad_i,  D[j,i] = prod_{i<l<=j} p_l,  P_j = D[j,0] p_0
    (the per-feature factors scale W_1's rows and W_2's columns: dgd_preconditioner.h)
    with D and P by cumprod over a masked [n,n] matrix per feature (decay_products), W_end one
    matmul per weight, and the read after each write y_j = M_j(q_j) of the main memory in the dual
    form (only W_s and n x n inner products, never M_j):
        W_2,j q_j = W_2,s (P_j q_j) - sum_i dh_i <eta_i D[j,i] k_i, q_j>
        W_1,j a_j = P_j (W_1,s a_j) - sum_i <a_i, a_j> eta_i D[j,i] do_i
The only Python loop is over chunks.

cms, per block, over z [B,T,D]: the chain of levels y = L_K(...L_1(z)) (model.cms.variant
"sequential"; "independent" sums the levels' residuals). Level l with period C reads at its weights
W, fixed for a period: k = W_k z, v = W_v z and eta = max_lr sigmoid(w z + b) for every token at once,
then per stretch of C tokens from the sequence start one pass for the reads M_W(z), one for the
gradients at the keys, and W <- W - sum_t kappa_t eta_t grad_t (one matmul per weight) at the period
end. A last stretch shorter than its period never updates in a training step (its update would come
after the sequence), so its gradient is not taken. The loop is over stretches: a period-1 level is
a recurrence through the nonlinear memory, token by token, as in memscope.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eager_mlp_memory import exact_gelu, key_factors  # noqa: E402

SELFMOD = ("k", "v", "eta", "alpha", "memory")  # SelfModMemory's order; the main memory last
MAIN = 4
PROJECTIONS = 4  # M_k, M_v, M_eta, M_alpha: read at x and, for their targets, at v


def hope_settings(config, rule, train):
    """What HOPE reads from the checkpoint's [model], [memory] and [train] tables (defaults of
    model/nn/lm_config.h, memory_rule.h and train_config.h). The memory rule gives HOPE only its
    inner lr ceiling and clip (block.cpp)."""
    def get(table, dotted, default):
        for key in dotted.split("."):
            if not isinstance(table, dict) or key not in table:
                return default
            table = table[key]
        return table

    c = {"layers": get(config, "layers", 2), "d_model": get(config, "d_model", 64),
         "periods": [int(s) for s in str(get(config, "cms.periods", "1,4,32,128")).split(",")],
         "variant": get(config, "cms.variant", "sequential"), "aux_weight": get(config, "hope.aux_weight", 0.1),
         "conv": get(config, "hope.conv", False), "shared_gates": get(config, "hope.shared_gates", False),
         "self_lr_scale": get(config, "hope.self_lr_scale", 1.0),
         "max_lr": get(rule, "lr.max", 1.0), "clip": get(rule, "inner.clip", 0.0)}
    unsupported = []
    if c["variant"] not in ("sequential", "independent"):
        unsupported.append(f"model.cms.variant={c['variant']}")
    if get(train, "bptt", 0):
        unsupported.append(f"train.bptt={get(train, 'bptt', 0)}")
    if get(train, "bf16_autocast", False):
        unsupported.append("train.bf16_autocast=true")
    if unsupported:
        raise SystemExit("eager_hope: this checkpoint uses what eager_hope.py does not implement: "
                         + ", ".join(unsupported))
    return c


def mlp(z, W1, W2, gain, shift):
    """M(z) for z [...,n,d] with W_1 [...,d,4d], W_2 [...,4d,d] (broadcast), LN's affine [...,1,d]."""
    o = exact_gelu(z @ W2.transpose(-1, -2)) @ W1.transpose(-1, -2)
    return z + F.layer_norm(o, o.shape[-1:]) * gain + shift


def inner_factors(z, target, W1, W2, gain, shift):
    """The pass of every z [...,n,d] at its memory and the factors of its inner gradient
    (eager_mlp_memory.key_factors, with create_graph while training): a = GELU(W_2 z), M(z), and
    dl/dh, dl/do for l = 1/2 |M(z) - target|^2 / d, so that grad W_1 = do a^T and grad W_2 = dh z^T."""
    return key_factors(z, target, W1, W2, gain, shift, exact_gelu, torch.is_grad_enabled(),
                       scale=1.0 / z.size(-1), with_read=True)


def clip_factor(d_o, a, d_h, z, clip):
    """min(1, clip/|g_t|) per token for g_t = (do a^T, dh z^T) (inner_clip.cpp), [...,n,1]."""
    norm_sq = d_o.pow(2).sum(-1) * a.pow(2).sum(-1) + d_h.pow(2).sum(-1) * z.pow(2).sum(-1)
    return (clip / norm_sq.clamp_min(1e-30).sqrt()).clamp_max(1.0)[..., None]


def decay_products(a):
    """a [...,n] -> D [...,n,n], D[j,i] = prod_{i<l<=j} a_l for i <= j and 0 above the diagonal, and
    P [...,n], P_j = prod_{l<=j} a_l: products taken directly (cumprod over a masked matrix), since the
    dgd factors alpha - eta k^2 can be zero or negative (no log-space)."""
    n = a.size(-1)
    strictly_lower = torch.ones(n, n, dtype=torch.bool, device=a.device).tril(-1)
    factors = a[..., :, None].expand(*a.shape, n).masked_fill(~strictly_lower, 1.0)
    return factors.cumprod(-2).tril(), a.cumprod(-1)


def causal_conv(window, taps):
    """Depthwise causal conv (SPEC §2): window [B,n+K-1,C] (the K-1 tokens before first), taps [C,K]
    -> [B,n,C], out_t = sum_k window_{t+k} taps_k."""
    return F.conv1d(window.transpose(1, 2), taps[:, None], groups=taps.size(0)).transpose(1, 2)


def selfmod_chunkwise(p, x, *, chunk, max_lr, clip, conv, shared_gates, self_lr_scale):
    """HOPE's self-modifying memory over x [B,T,d] from its initial state (the module docstring).
    p: the block's `selfmod.` parameters by memscope's names. Returns y [B,T,d] and the auxiliary
    retrieval loss summed over the batch and the tokens."""
    B, d = x.size(0), x.size(-1)
    stack = lambda name: torch.cat([p[f"M_{m}_{name}"] for m in SELFMOD])  # noqa: E731  [5,...]
    # Memory-major, [5,B,...]: the four projection memories and the main one are then contiguous
    # slices (split, not select: no zero-filled gradient of the whole stack per use). Every sequence
    # starts from the initial state (memscope's initial_state: expanded, then copied).
    W1 = stack("w1_0")[:, None].expand(-1, B, -1, -1).contiguous()   # [5,B,d,4d]
    W2 = stack("w2_0")[:, None].expand(-1, B, -1, -1).contiguous()   # [5,B,4d,d]
    gain, shift = stack("ln_weight")[:, None, None], stack("ln_bias")[:, None, None]  # [5,1,1,d]
    gain_p, gain_m = gain.split([PROJECTIONS, 1])
    shift_p, shift_m = shift.split([PROJECTIONS, 1])
    rate_scale = x.new_tensor([self_lr_scale] * PROJECTIONS + [1.0])[:, None, None, None]  # [5,1,1,1]
    gate = (lambda z: torch.sigmoid(z.mean(-1, keepdim=True))) if shared_gates else torch.sigmoid  # noqa: E731
    q = x @ p["w_q"].t()
    if conv:  # q | k | v each through its own taps; q's over the whole sequence at once
        taps_q, taps_kv = p["conv_weight"][:d], p["conv_weight"][d:]
        q = causal_conv(F.pad(q, (0, 0, 3, 0)), taps_q)
        carry = x.new_zeros(B, 3, 2 * d)                         # the last 3 tokens' pre-conv k | v
    q = F.normalize(q, dim=-1)
    ys, aux = [], 0.0
    for xc, qc in zip(x.split(chunk, 1), q.split(chunk, 1)):
        W1_p, W1_m = W1.split([PROJECTIONS, 1])
        W2_p, W2_m = W2.split([PROJECTIONS, 1])
        # The projection memories at the chunk start: k, v, eta, alpha for the chunk's tokens.
        k_in, v, eta, alpha = mlp(xc, W1_p, W2_p, gain_p, shift_p).unbind(0)    # [B,n,d] each
        if conv:
            window = torch.cat([carry, torch.cat([k_in, v], -1)], 1)
            carry = window[:, -3:]
            k_in, v = causal_conv(window, taps_kv).split(d, -1)
        k = F.normalize(k_in, dim=-1)
        eta = max_lr * gate(eta + p["b_lr"])                      # [B,n,1] shared, else [B,n,d]
        alpha = gate(alpha + p["b_retain"])
        with torch.no_grad():  # v-hat = sg(M_box(v)); the main memory stores v itself
            self_targets = mlp(v, W1_p, W2_p, gain_p, shift_p)
        targets = torch.cat([self_targets, v[None]])              # [5,B,n,d]
        a, at_key, d_h, d_o = inner_factors(k, targets, W1, W2, gain, shift)
        retrieved = at_key[MAIN]  # seed 004 change 1, at the chunk-start main memory
        aux = aux + ((retrieved - v.detach()).pow(2).mean(-1) + (retrieved.detach() - v).pow(2).mean(-1)).sum()
        if clip > 0:
            factor = clip_factor(d_o, a, d_h, k, clip)
            d_o, d_h = d_o * factor, d_h * factor
        # dgd unrolled over the chunk, per memory and feature.
        rate = rate_scale * eta                                    # [5,B,n,1|d]
        D, P = decay_products((alpha - rate * k.pow(2)).transpose(-1, -2))  # [5,B,d,n,n], [5,B,d,n]
        to_end = rate * D[..., -1, :].transpose(-1, -2)            # eta_i D[n,i]: [5,B,n,d]
        P_end = P[..., -1]                                         # [5,B,d]
        # The main memory's reads after each write (dual form).
        Dm, Pm = D[MAIN], P[MAIN].transpose(-1, -2)                # [B,d,n,n], [B,n,d]
        key_query = torch.einsum("bjf,bfji,bif->bji", qc, Dm, eta * k)                # 0 for i > j
        h_q = (Pm * qc) @ W2_m.squeeze(0).transpose(-1, -2) - key_query @ d_h[MAIN]
        a_q = exact_gelu(h_q)
        gram = a_q @ a[MAIN].transpose(-1, -2)                                        # <a_j, a_i>
        o_q = (Pm * (a_q @ W1_m.squeeze(0).transpose(-1, -2))
               - torch.einsum("bji,bfji,bif->bjf", gram, Dm, eta * d_o[MAIN]))
        ys.append(qc + F.layer_norm(o_q, (d,)) * gain_m.squeeze(0) + shift_m.squeeze(0))
        W1, W2 = (W1 * P_end[..., None] - (to_end * d_o).transpose(-1, -2) @ a,
                  W2 * P_end[..., None, :] - d_h.transpose(-1, -2) @ (to_end * k))
    return torch.cat(ys, 1), aux


def cms_level(p, z, period, *, max_lr, clip):
    """One CMS level over z [B,T,D] from its initial state (the module docstring). p: the level's
    parameters by memscope's names without the `levelN_` prefix."""
    W1, W2, gain, shift = p["w1_0"], p["w2_0"], p["ln_weight"], p["ln_bias"]  # [1,D,4D], [1,4D,D], [1,D]
    k, v = z @ p["w_k"].t(), z @ p["w_v"].t()
    eta = max_lr * torch.sigmoid(z @ p["lr_w"] + p["lr_b"])[..., None]        # [B,T,1]
    ys = []
    for zs, ks, vs, es in zip(*(t.split(period, 1) for t in (z, k, v, eta))):
        ys.append(mlp(zs, W1, W2, gain, shift))
        if zs.size(1) < period:
            break  # positions count from the sequence start: only the last stretch can be short
        a, _, d_h, d_o = inner_factors(ks, vs, W1, W2, gain, shift)
        weight = es * clip_factor(d_o, a, d_h, ks, clip) if clip > 0 else es
        W1 = W1 - (d_o * weight).transpose(-1, -2) @ a
        W2 = W2 - (d_h * weight).transpose(-1, -2) @ ks
    return torch.cat(ys, 1)


def cms(p, z, *, periods, variant, max_lr, clip):
    """The CMS over z [B,T,D]. p: the block's `cms.` parameters by memscope's names."""
    level = lambda i: {k[len(f"level{i}_"):]: t for k, t in p.items() if k.startswith(f"level{i}_")}  # noqa: E731
    if variant == "independent":
        out = z
        for i, period in enumerate(periods):
            out = out + cms_level(level(i), z, period, max_lr=max_lr, clip=clip) - z
        return out
    for i, period in enumerate(periods):
        z = cms_level(level(i), z, period, max_lr=max_lr, clip=clip)
    return z


class SelfModStep:
    """HOPE's self-modifying memory token by token (SPEC §7), as the debugger steps it (chunk 1):
    what a researcher writes to watch one token at a time. The same math as selfmod_chunkwise at a
    chunk of one token, written per token: the projections read at the memories before the token,
    every memory writes by dgd (W_1 <- diag(p) W_1 - eta do a^T, W_2 <- W_2 diag(p) - eta dh k^T,
    p = alpha - eta k^2 per feature), and the main memory is read at q after its write."""

    def __init__(self, p, *, max_lr, clip, conv, shared_gates, self_lr_scale, **_):
        stack = lambda name: torch.cat([p[f"M_{m}_{name}"] for m in SELFMOD])  # noqa: E731  [5,...]
        self.w1_0, self.w2_0 = stack("w1_0")[:, None], stack("w2_0")[:, None]  # [5,1,d,4d], [5,1,4d,d]
        gain, shift = stack("ln_weight")[:, None, None], stack("ln_bias")[:, None, None]  # [5,1,1,d]
        self.gain, self.shift = gain, shift
        self.gain_p, self.gain_m = gain.split([PROJECTIONS, 1])
        self.shift_p, self.shift_m = shift.split([PROJECTIONS, 1])
        self.rate_scale = self.w1_0.new_tensor([self_lr_scale] * PROJECTIONS + [1.0])[:, None, None, None]
        self.gate = (lambda z: torch.sigmoid(z.mean(-1, keepdim=True))) if shared_gates else torch.sigmoid  # noqa: E731
        self.w_q, self.b_lr, self.b_retain = p["w_q"], p["b_lr"], p["b_retain"]
        self.taps = p["conv_weight"] if conv else None
        self.max_lr, self.clip = max_lr, clip

    def initial_state(self):
        d = self.w_q.size(0)
        carry = self.w_q.new_zeros(1, 3, 3 * d)  # the last 3 tokens' pre-conv q | k | v
        return self.w1_0.clone(), self.w2_0.clone(), carry

    def step(self, x_t, state):
        """x_t [d] (the normed stream) -> y [d]; state advances."""
        W1, W2, carry = state
        d = x_t.size(-1)
        x = x_t.view(1, 1, d)
        W1_p, W1_m = W1.split([PROJECTIONS, 1])
        W2_p, W2_m = W2.split([PROJECTIONS, 1])
        k_in, v, eta, alpha = mlp(x, W1_p, W2_p, self.gain_p, self.shift_p).unbind(0)  # [1,1,d] each
        q = x @ self.w_q.t()
        if self.taps is not None:  # q | k | v each through its own taps, over this token and the 3 before
            window = torch.cat([carry, torch.cat([q, k_in, v], -1)], 1)
            carry = window[:, 1:]
            q, k_in, v = causal_conv(window, self.taps).split(d, -1)
        q, k = F.normalize(q, dim=-1), F.normalize(k_in, dim=-1)
        eta = self.max_lr * self.gate(eta + self.b_lr)
        alpha = self.gate(alpha + self.b_retain)
        with torch.no_grad():  # v-hat = sg(M_box(v)); the main memory stores v itself
            self_targets = mlp(v, W1_p, W2_p, self.gain_p, self.shift_p)
        targets = torch.cat([self_targets, v[None]])  # [5,1,1,d]
        a, _, d_h, d_o = inner_factors(k, targets, W1, W2, self.gain, self.shift)
        if self.clip > 0:
            factor = clip_factor(d_o, a, d_h, k, self.clip)
            d_o, d_h = d_o * factor, d_h * factor
        rate = self.rate_scale * eta                                   # [5,1,1,1|d]
        keep = (alpha - rate * k.pow(2)).transpose(-1, -2)             # [5,1,d,1]: W_1's rows, W_2's columns
        W1 = W1 * keep - (rate * d_o).transpose(-1, -2) @ a
        W2 = W2 * keep.transpose(-1, -2) - d_h.transpose(-1, -2) @ (rate * k)
        y = mlp(q, W1[MAIN], W2[MAIN], self.gain_m.squeeze(0), self.shift_m.squeeze(0))  # after the write
        return y.reshape(d), (W1, W2, carry)


class CmsStep:
    """The CMS token by token (the module docstring's cms): level l reads at its weights W and takes
    each token's inner gradient there, summed until its period ends (positions from the sequence
    start), when W moves by the sum. The gradients are taken as the tokens come, since W is fixed
    within a period."""

    def __init__(self, p, *, periods, variant, max_lr, clip, **_):
        level = lambda i: {k[len(f"level{i}_"):]: t for k, t in p.items() if k.startswith(f"level{i}_")}  # noqa: E731
        self.levels = [level(i) for i in range(len(periods))]
        self.periods, self.variant, self.max_lr, self.clip = periods, variant, max_lr, clip

    def initial_state(self):
        # Per level: W_1, W_2, their pending changes and the tokens seen.
        return [[q["w1_0"], q["w2_0"], torch.zeros_like(q["w1_0"]), torch.zeros_like(q["w2_0"]), 0]
                for q in self.levels]

    def level_step(self, q, period, s, z):
        W1, W2, dW1, dW2, seen = s
        z = z.view(1, 1, -1)
        y = mlp(z, W1, W2, q["ln_weight"], q["ln_bias"])
        k, v = z @ q["w_k"].t(), z @ q["w_v"].t()
        eta = self.max_lr * torch.sigmoid(z @ q["lr_w"] + q["lr_b"])[..., None]  # [1,1,1]
        a, _, d_h, d_o = inner_factors(k, v, W1, W2, q["ln_weight"], q["ln_bias"])
        weight = eta * clip_factor(d_o, a, d_h, k, self.clip) if self.clip > 0 else eta
        dW1 = dW1 - (d_o * weight).transpose(-1, -2) @ a
        dW2 = dW2 - (d_h * weight).transpose(-1, -2) @ k
        seen += 1
        if seen % period == 0:
            W1, W2, dW1, dW2 = W1 + dW1, W2 + dW2, torch.zeros_like(dW1), torch.zeros_like(dW2)
        s[:] = [W1, W2, dW1, dW2, seen]
        return y.reshape(-1)

    def step(self, z, state):
        """z [D] -> [D]; state advances."""
        if self.variant == "independent":
            out = z
            for q, period, s in zip(self.levels, self.periods, state):
                out = out + self.level_step(q, period, s, z) - z
            return out
        for q, period, s in zip(self.levels, self.periods, state):
            z = self.level_step(q, period, s, z)
        return z
