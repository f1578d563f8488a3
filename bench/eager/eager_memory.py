"""The memory recurrence of memscope's linear memory, written the way a researcher would in eager
PyTorch: one Python loop over tokens, batched over heads. Section numbers (§) are
/work/shared/SPEC.md's; the C++ reference is model/memory/sequential_step.cpp.

Inputs are the per-token quantities of SPEC §2 for one sequence, after projection, feature map
and gates (exactly what `memscope-cli memory-trace` records):

    phi_k, phi_q  [T,H,d_phi]   keys and queries after phi (L2-normalised, §2)
    v             [T,H,d_v]     values
    retain        [T,H]         alpha_t (§1)
    lr            [T,H]         eta_t
    momentum      [T,H]         beta_t
    gamma         [T,H,c]       window weights gamma_{t,i}, oldest first (§4); None means c = 1 and
                                gamma = 1 (the `uniform` weight 1/c with c = 1)

MemoryLayer / run_layer (at the end) is the whole layer step around the same recurrence: from the
layer input x_t and the layer's parameters, the q/k/v projection, the optional causal conv, phi, the
gates, then write() and the read (linear memory, identity phi, c = 1; see its docstring).

Supported by run_memory: linear memory (§3), the l2 attentional bias (§4) over an Omega window of c >= 1 tokens,
l2-decay / none retention, the gd-momentum (Titans) and muon (Atlas) optimisers (§5), Newton-Schulz
with one triple or a per-step schedule (§6), memory.inner.normalize, memory.inner.clip and the
read order. Not here: MLP memory, the lp / huber / dot biases, lq-normalize / softmax retention,
dgd. run_memory(grad_chunk=b) is §9's reference for the chunkwise form: the same per-token loop,
but every gradient is taken at the memory of the chunk start.

run_memory_chunkwise is the chunkwise-parallel form itself (§9; Titans §3.2, TTT's "dual form")
for Titans' rule (linear memory, l2 bias, c = 1, gd-momentum, l2-decay / none retention): per chunk
of b tokens a few [b, d] and [b, b] matmuls instead of b d_v x d_phi memory updates (its docstring
has the algebra). MemoryLayer.run(x, chunk=b) is the layer around it, with the projections, conv,
phi and gates batched over all T tokens. C++ reference: model/memory/chunkwise_forward.cpp
(ChunkRunner::dual_form) and linear_scan.cpp.
"""
import torch

# §6: Muon's quintic (K. Jordan, 2024) and k = 5; model/memory/ns_schedule.h.
MUON_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def features(z, poly=None):
    """phi of SPEC §2 over the last dimension: z / max(||z||, 1e-12), then, with the coefficients
    poly = a_1..a_p, sum_i a_i z^i (Horner, as apply_feature_map); identity features without them."""
    z = z / z.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    if poly is None:
        return z
    acc = poly[-1] * z
    for a in reversed(poly[:-1]):
        acc = (acc + a) * z
    return acc


def newton_schulz(g, steps=5, coefficients=MUON_COEFFICIENTS, per_step=None):
    """NS_k(G) for a batch of matrices G [B,rows,cols] (§6, model/memory/newton_schulz.cpp):
    X = G / (||G||_F + 1e-7); tall G is transposed so A = X X^T is the small Gram matrix;
    k times: A = X X^T, B = b A + c A A, X = a X + B X."""
    x = g / (torch.linalg.vector_norm(g, dim=(-2, -1), keepdim=True) + 1e-7)
    tall = g.size(-2) > g.size(-1)
    if tall:
        x = x.transpose(-2, -1)
    for a, b, c in per_step or [coefficients] * steps:
        gram = torch.bmm(x, x.transpose(-2, -1))
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b A + c A A
        x = torch.baddbmm(x, poly, x, beta=a)                    # a X + B X
    return x.transpose(-2, -1) if tall else x


def write(optimiser, M, S, k, v, weights, alpha, eta, beta, *, ns_steps=5, ns_coefficients=MUON_COEFFICIENTS,
          ns_per_step=None, inner_clip=0.0, gradient_at=None):
    """One token's write (§4 l2 bias, §5 optimiser and retention) for all heads at once:
    M, S [H,d_v,d_phi] are M_{t-1}, S_{t-1}; k [H,c,d_phi], v [H,c,d_v] the window's keys and values,
    oldest first; weights [H,c] gamma_{t,i} times the inner scale; alpha, eta, beta [H,1,1].
    gradient_at: the memory the gradient is taken at (§9 chunkwise: the chunk start), default M.
    Returns M_t, S_t."""
    # §4 l2 bias: dl/dy = M phi_i - v_i at M_{t-1}; psi = gamma-weighted errors, g = psi^T K.
    at = M if gradient_at is None else gradient_at
    err = torch.baddbmm(v, k, at.transpose(1, 2), beta=-1)                 # [H,c,d_v]
    g = torch.bmm((err * weights[:, :, None]).transpose(1, 2), k)          # [H,d_v,d_phi]
    if inner_clip > 0:
        g = g * (inner_clip / torch.linalg.vector_norm(g, dim=(1, 2), keepdim=True).clamp_min(1e-15)).clamp_max(1)
    # §5 optimiser, then l2-decay retention (alpha = 1 for retention `none`).
    if optimiser == "gd-momentum":
        S = beta * S + eta * g
        M = alpha * M - S
    else:  # muon: the lr comes after NS, which discards scale (§5)
        S = beta * S + g
        M = alpha * M - eta * newton_schulz(S, ns_steps, ns_coefficients, ns_per_step)
    return M, S


def run_memory(optimiser, m0, phi_k, v, phi_q, retain, lr, momentum, gamma=None, *,
               ns_steps=5, ns_coefficients=MUON_COEFFICIENTS, ns_per_step=None,
               inner_scale=1.0, inner_clip=0.0, read_after_write=True, record=False, grad_chunk=1):
    """Runs the sequential step (§9, chunk b = 1) over T tokens from M_0 = m0 [H,d_v,d_phi], S_0 = 0.

    optimiser: "gd-momentum" (Titans)  S_t = beta_t S_{t-1} + eta_t g_t,  M_t = alpha_t M_{t-1} - S_t
               "muon"        (Atlas)   S_t = beta_t S_{t-1} + g_t,        M_t = alpha_t M_{t-1} - eta_t NS_k(S_t)
    with g_t = inner_scale * sum_i gamma_{t,i} (M_{t-1} phi_i - v_i) phi_i^T (§4, l2 bias; the sum runs
    over the window's c tokens, c = 1 is the delta rule). inner_scale is memory.inner.normalize's
    1/d_v (else 1); inner_clip > 0 rescales g_t to at most that Frobenius norm per head.

    grad_chunk = b > 1 is §9's reference for the chunkwise form: g_t is taken at the memory of the
    start of t's chunk (tokens 0..b-1, b..2b-1, ...) instead of M_{t-1}; everything else per token.

    Returns y [T,H,d_v] (the read M_t phi_q, or M_{t-1} phi_q when read_after_write is False), and
    with record=True also M and S after every token, [T+1,H,...] with M_0 and S_0 first.
    """
    if optimiser not in ("gd-momentum", "muon"):
        raise ValueError(f"unsupported optimiser {optimiser!r}")
    T = phi_k.size(0)
    c = 1 if gamma is None else gamma.size(-1)
    # Per-token gates as [T,H,1,1] so they scale each head's matrix.
    alpha, eta, beta = (g[..., None, None] for g in (retain, lr, momentum))
    # §4 window: token t sees keys t-c+1..t. Zero-padding the front gives every t a full window;
    # the trace's gamma is 0 at the padded slots, so they contribute nothing.
    if c > 1:
        phi_k = torch.cat([phi_k.new_zeros((c - 1,) + phi_k.shape[1:]), phi_k])
        v = torch.cat([v.new_zeros((c - 1,) + v.shape[1:]), v])
    weights = (gamma if gamma is not None else phi_k.new_ones(T, phi_k.size(1), 1)) * inner_scale

    M = m0.clone()
    S = torch.zeros_like(M)
    ys = []
    Ms, Ss = ([M.clone()], [S.clone()]) if record else (None, None)
    for t in range(T):
        M_before = M
        if t % grad_chunk == 0:
            M_chunk_start = M
        M, S = write(optimiser, M, S, phi_k[t:t + c].transpose(0, 1), v[t:t + c].transpose(0, 1), weights[t],
                     alpha[t], eta[t], beta[t], ns_steps=ns_steps, ns_coefficients=ns_coefficients,
                     ns_per_step=ns_per_step, inner_clip=inner_clip,
                     gradient_at=M_chunk_start if grad_chunk > 1 else None)
        # Read y_t = M_t phi(q_t) (after-write) or M_{t-1} phi(q_t).
        ys.append(torch.bmm(M if read_after_write else M_before, phi_q[t].unsqueeze(-1)).squeeze(-1))
        if record:
            Ms.append(M)
            Ss.append(S)
    y = torch.stack(ys)
    if record:
        return y, torch.stack(Ms), torch.stack(Ss)
    return y


def decay_matrix(a):
    """The §9 scan z_t = a_t z_{t-1} + u_t inside a chunk has the solution z_t = P_t z_0 + sum_s D[t,s] u_s
    with P_t = prod_{j<=t} a_j (a.cumprod(-1)) and this D: a [...,n] -> [...,n,n],
    D[t,s] = prod_{s<j<=t} a_j for s <= t, 0 above the diagonal. Mamba-2's segsum: log-products summed
    over a masked [n,n] matrix rather than L_t - L_s, so a_j = 0 (momentum off) gives exp(-inf) = 0, not
    nan. (memscope's linear_scan.cpp takes the products directly, by cumprod over the same matrix.)"""
    n = a.size(-1)
    ones = torch.ones(n, n, dtype=torch.bool, device=a.device)
    log_a = a.log()[..., :, None].expand(*a.shape, n)               # [..., t, s] = log a_t
    seg = log_a.masked_fill(~ones.tril(-1), 0).cumsum(-2)            # sum_{s<j<=t} log a_j
    return seg.masked_fill(~ones.tril(), float("-inf")).exp()


def chunk_major(phi_k, v, phi_q, retain, lr, momentum, gamma, chunk, inner_scale):
    """The §9 chunking both chunkwise forms share: [T,H,...] -> [N,H,b,...], chunk-major, heads
    batched; the padding (after the last real token, so causally invisible to it) is alpha = beta = 1,
    everything else 0. Returns N, the last chunk's last real token, and phi, q, v, alpha, eta, beta
    and the inner-loss weights s_r = gamma_r * inner_scale ([N,H,b,1]) in chunks."""
    if gamma is not None and gamma.size(-1) != 1:
        raise ValueError("the chunkwise forms here have window c = 1 only (gamma [T,H,1])")
    T = phi_k.size(0)
    b = chunk
    N = -(-T // b)
    pad = N * b - T

    def chunked(z, fill):
        if pad:
            z = torch.cat([z, z.new_full((pad,) + z.shape[1:], fill)])
        return z.view(N, b, *z.shape[1:]).transpose(1, 2)

    weight = inner_scale * (gamma[..., 0] if gamma is not None else torch.ones_like(retain))
    return (N, (T - 1) % b, chunked(phi_k, 0), chunked(phi_q, 0), chunked(v, 0), chunked(retain, 1),
            chunked(lr, 0), chunked(momentum, 1), chunked(weight, 0)[..., None])


def chunk_psi(scale, phi, M, val, inner_clip):
    """psi_r = s_r (M_0 phi_r - v_r) for every token of a chunk at its start memory M_0 (§4, §9):
    [H,b,d_v]. inner_clip > 0: g_r = psi_r phi_r^T has Frobenius norm |psi_r| |phi_r|, so clipping
    scales psi_r."""
    psi = scale * (phi @ M.transpose(-1, -2) - val)
    if inner_clip > 0:
        norm = psi.norm(dim=-1, keepdim=True) * phi.norm(dim=-1, keepdim=True)
        psi = psi * (inner_clip / norm.clamp_min(1e-15)).clamp_max(1)
    return psi


def run_memory_chunkwise(m0, phi_k, v, phi_q, retain, lr, momentum, gamma=None, *, chunk,
                         inner_scale=1.0, inner_clip=0.0, record=False):
    """The chunkwise-parallel form (§9; Titans §3.2, TTT's dual form) of Titans' rule: linear memory
    (§3), l2 bias with c = 1 (§4), gd-momentum with l2-decay retention (§5; retention `none` is
    retain = 1). Same inputs and outputs as run_memory (read after write); chunks of b = `chunk` tokens
    from token 0, the last one shorter when b does not divide T.

    §9: inside a chunk every gradient is taken at the chunk-start memory M_0 (S_0 its momentum), so
    with c = 1 all b of them are known at once, g_r = psi_r phi_r^T with
        psi_r = s_r (M_0 phi_r - v_r),   s_r = gamma_r * inner_scale          (§4)
    and the §5 recurrences are linear scans in the tokens r = 1..b of the chunk:
        S_t = Pb_t S_0 + sum_r Db[t,r] eta_r g_r                             (momentum, beta)
        M_t = Pa_t M_0 - sum_s Da[t,s] S_s                                   (retention, alpha)
            = Pa_t M_0 - c_t S_0 - sum_r A[t,r] psi_r phi_r^T,
    with P, D of decay_matrix, c = Da Pb and A = (Da Db) diag(eta). So the read y_t = M_t q_t is
        y_t = Pa_t M_0 q_t - c_t S_0 q_t - sum_r A[t,r] (phi_r . q_t) psi_r,
    i.e. Y = Pa * (Q M_0^T) - c * (Q S_0^T) - (A * Q Phi^T) Psi: [b,b] and [b,d] matmuls, no per-token
    M_t (A is lower triangular, so A * Q Phi^T is the causal "attention" of the dual form). The next
    chunk needs only the last row t = e: M_e = Pa_e M_0 - c_e S_0 - Psi^T diag(A[e]) Phi and
    S_e = Pb_e S_0 + Psi^T diag(Db[e] eta) Phi. Everything not depending on M_0 (the decays, A, c and
    A * Q Phi^T) is computed for all chunks at once before the loop over chunks.

    inner_clip > 0: g_r = psi_r phi_r^T has Frobenius norm |psi_r| |phi_r|, so clipping scales psi_r.
    record=True materialises M_t and S_t from the same coefficients (an einsum over the chunk; for the
    check only) and returns y, M, S like run_memory.
    """
    T, H, _ = phi_k.shape
    b = chunk
    N, e_last, phi, q, val, alpha, eta, beta, scale = chunk_major(   # [N,H,b,d], [N,H,b], [N,H,b,1]
        phi_k, v, phi_q, retain, lr, momentum, gamma, chunk, inner_scale)

    # The scan coefficients (§9), for all chunks at once.
    Da, Db = decay_matrix(alpha), decay_matrix(beta)                             # [N,H,b,b]
    Pa, Pb = alpha.cumprod(-1), beta.cumprod(-1)                                 # [N,H,b]
    A = (Da @ Db) * eta[..., None, :]                   # M_t's coefficient of psi_r phi_r^T
    c = (Da @ Pb[..., None])[..., 0]                    # M_t's coefficient of S_0
    attn = A * (q @ phi.transpose(-1, -2))              # A[t,r] (q_t . phi_r), lower triangular
    w_s = Db * eta[..., None, :]                        # S_t's coefficient of psi_r phi_r^T

    # Each chunk's slices, taken once: indexing [i] in the loop would give every chunk's backward a
    # zero-filled gradient of the whole tensor (select's), quadratic in the chunk count; unbind's
    # backward is one stack. memscope splits its chunks once too (chunkwise_forward.cpp).
    phi, q, val, scale, Pa, Pb, c, A, attn, w_s = (
        t.unbind(0) for t in (phi, q, val, scale, Pa, Pb, c, A, attn, w_s))
    M = m0
    S = torch.zeros_like(m0)
    ys, Ms, Ss = [], [m0[None]], [S[None]]
    for i in range(N):
        e = b - 1 if i < N - 1 else e_last
        psi = chunk_psi(scale[i], phi[i], M, val[i], inner_clip)                 # [H,b,d_v]
        ys.append(Pa[i][..., None] * (q[i] @ M.transpose(-1, -2))
                  - c[i][..., None] * (q[i] @ S.transpose(-1, -2)) - attn[i] @ psi)
        if record:
            Ms.append((Pa[i][:, :e + 1, None, None] * M[:, None] - c[i][:, :e + 1, None, None] * S[:, None]
                       - torch.einsum("htr,hrv,hrp->htvp", A[i][:, :e + 1], psi, phi[i])).transpose(0, 1))
            Ss.append((Pb[i][:, :e + 1, None, None] * S[:, None]
                       + torch.einsum("htr,hrv,hrp->htvp", w_s[i][:, :e + 1], psi, phi[i])).transpose(0, 1))
        # The chunk-end state from row e (the next chunk's gradient point, §9).
        M, S = (Pa[i][:, e, None, None] * M - c[i][:, e, None, None] * S
                - (psi * A[i][:, e, :, None]).transpose(-1, -2) @ phi[i],
                Pb[i][:, e, None, None] * S + (psi * w_s[i][:, e, :, None]).transpose(-1, -2) @ phi[i])
    y = torch.stack(ys).transpose(1, 2).reshape(N * b, H, -1)[:T]
    if record:
        return y, torch.cat(Ms), torch.cat(Ss)
    return y


def run_memory_chunkwise_muon(m0, phi_k, v, phi_q, retain, lr, momentum, gamma=None, *, chunk,
                              ns_steps=5, ns_coefficients=MUON_COEFFICIENTS, ns_per_step=None,
                              inner_scale=1.0, inner_clip=0.0, record=False):
    """The chunkwise form (§9) of Atlas's rule at c = 1: linear memory, l2 bias, Muon with l2-decay
    retention, read after write; inputs and outputs as run_memory_chunkwise. As a researcher writes
    it in eager PyTorch: inside a chunk every gradient g_r = psi_r phi_r^T is taken at the
    chunk-start M_0, so the momentum is a linear scan,
        S_t = Pb_t S_0 + sum_r Db[t,r] g_r,
    but NS is not linear in S_t, so every S_t is built ([H,b,d,d], one einsum), orthogonalised in one
    batched newton_schulz over the chunk's H*b matrices, and the retention scan then gives
        M_t = Pa_t M_0 - sum_s Da[t,s] eta_s NS(S_s),   y_t = M_t q_t."""
    T, H, _ = phi_k.shape
    b = chunk
    N, e_last, phi, q, val, alpha, eta, beta, scale = chunk_major(
        phi_k, v, phi_q, retain, lr, momentum, gamma, chunk, inner_scale)
    Da, Db = decay_matrix(alpha), decay_matrix(beta)
    Pa, Pb = alpha.cumprod(-1), beta.cumprod(-1)
    retention = Da * eta[..., None, :]                  # M_t's coefficient of NS(S_s)

    M = m0
    S = torch.zeros_like(m0)
    ys, Ms, Ss = [], [m0[None]], [S[None]]
    for i in range(N):
        e = b - 1 if i < N - 1 else e_last
        psi = chunk_psi(scale[i], phi[i], M, val[i], inner_clip)                 # [H,b,d_v]
        S_t = Pb[i, :, :, None, None] * S[:, None] + torch.einsum("htr,hrv,hrp->htvp", Db[i], psi, phi[i])
        U = newton_schulz(S_t.flatten(0, 1), ns_steps, ns_coefficients, ns_per_step).view_as(S_t)
        M_t = Pa[i, :, :, None, None] * M[:, None] - torch.einsum("hts,hsvp->htvp", retention[i], U)
        ys.append(torch.einsum("htvp,htp->htv", M_t, q[i]))
        if record:
            Ms.append(M_t[:, :e + 1].transpose(0, 1))
            Ss.append(S_t[:, :e + 1].transpose(0, 1))
        M, S = M_t[:, e], S_t[:, e]
    y = torch.stack(ys).transpose(1, 2).reshape(N * b, H, -1)[:T]
    if record:
        return y, torch.cat(Ms), torch.cat(Ss)
    return y


def project_token(x_t, conv, w_qkv, conv_taps, heads, head_dim):
    """One token's fused [q|k|v] projection and the §2 depthwise causal conv (width 4: tokens t-3..t,
    oldest first): x_t [D] and conv, the last 3 [q|k|v] rows (None: no conv) -> q, k, v [H,d] and the
    conv's rows after this token."""
    qkv = torch.nn.functional.linear(x_t, w_qkv)                       # [3*H*d]
    if conv is not None:
        window = torch.cat([conv, qkv[None]])                          # [4, 3*H*d]
        conv = window[1:]
        qkv = (window * conv_taps).sum(0)
    q, k, v = qkv.view(3, heads, head_dim)                             # per-head split
    return q, k, v, conv


def project_tokens(x, w_qkv, conv_weight, heads, head_dim):
    """project_token for all T tokens at once (MemoryLayerImpl::project): x [T,D] -> q, k, v [T,H,d],
    the conv as F.conv1d with groups = channels and left padding 3 (tap 3 is token t, taps 0..2 the
    3 before), as Mamba / Titans code does."""
    T = x.size(0)
    qkv = torch.nn.functional.linear(x, w_qkv)                         # [T, 3*H*d]
    if conv_weight is not None:
        qkv = torch.nn.functional.conv1d(qkv.t()[None], conv_weight[:, None], padding=3,
                                         groups=qkv.size(1))[0, :, :T].t()
    return qkv.view(T, 3, heads, head_dim).unbind(1)


def inner_loss(M, phi_k, v, gamma=None, inner_scale=1.0):
    """The surprise L_t(M) = inner_scale * sum_i gamma_{t,i} 1/2 ||M phi_i - v_i||^2 over the window
    (§4, §8) for one memory per token, M [T,H,d_v,d_phi]; phi_k [T,H,d_phi], v [T,H,d_v] -> [T,H].
    With M = M_{t-1} it is the trace's loss_before, with M = M_t its loss_after."""
    c = 1 if gamma is None else gamma.size(-1)
    pad = lambda z: torch.cat([z.new_zeros((c - 1,) + z.shape[1:]), z])
    keys, values = pad(phi_k).unfold(0, c, 1), pad(v).unfold(0, c, 1)  # [T,H,d,c], window as columns
    e = M @ keys - values                                                # [T,H,d_v,c]
    w = gamma if gamma is not None else 1.0
    return inner_scale * (w * 0.5 * e.pow(2).sum(-2)).sum(-1)


class MemoryLayer:
    """The whole memory layer step (SPEC §1-§5, §9): from the layer input x_t [D] of one sequence
    (B = 1, batch dim dropped like run_memory's) to the read y_t [H,d_v], as a researcher would write
    it per token. C++ reference: MemoryLayerImpl::project / features / gate_value
    (model/memory/memory_layer.cpp) and ::step (sequential_step.cpp).

    params: memscope's parameter names and shapes (memory-trace --parameters writes them as param/NAME):
        w_q, w_k, w_v       [H*d, D]    projections, y = x W^T
        conv_weight         [3*H*d, 4]  optional: depthwise causal conv over the [q|k|v] channels, tap 3
                                        is the current token, taps 0..2 the 3 before it (zeros at start)
        gate_NAME_w, _b     [H, D], [H] NAME in retain, lr, momentum; a missing gate is the rule's
                                        constant (retain 1: retention none; momentum 0: disabled)
        m0                  [H, d_v, d_phi]
    Scope: linear memory, identity feature map (phi = z / max(||z||, 1e-12) per head), window c = 1
    with gamma = 1 (uniform or decay weights; no gated gamma), the l2 bias, gd-momentum / muon.

    Written choices (what a competent researcher would write, not hand-tuned):
      * q/k/v as ONE fused projection, x_t @ [W_q; W_k; W_v]^T (nn.Linear(D, 3*H*d, bias=False)),
        which is also the channel order the conv weight is laid out in. memscope does three matmuls.
      * each gate its own small projection, F.linear(x_t, w, b) (one nn.Linear(D, H) per gate);
        fusing the three into one [3H, D] matmul would save two tiny calls per token.
      * the conv as a rolling [4, 3*H*d] window times the taps, summed over time; F.conv1d with
        groups = 3*H*d on the same window is the alternative (more overhead for one output).
      * everything per token inside the loop, as the brief's per-token step does (memscope's step
        does the same). Not done: hoisting the projections, conv, norms and gates out of the loop
        as [T, D] matmuls (they do not depend on M), which a chunkwise/training code would do.
      * run(x, chunk=b) is that chunkwise code (§9): project() does the projections, conv, norms and
        gates for all T tokens at once (the conv as F.conv1d with groups = channels and left
        padding 3, as Mamba / Titans code does), then run_memory_chunkwise (gd-momentum, read after
        write only).
    """

    def __init__(self, params, heads, optimiser, *, max_lr=1.0, ns_steps=5, ns_coefficients=MUON_COEFFICIENTS,
                 ns_per_step=None, inner_scale=1.0, inner_clip=0.0, read_after_write=True):
        if optimiser not in ("gd-momentum", "muon"):
            raise ValueError(f"unsupported optimiser {optimiser!r}")
        self.heads, self.optimiser, self.max_lr = heads, optimiser, max_lr
        self.ns = dict(ns_steps=ns_steps, ns_coefficients=ns_coefficients, ns_per_step=ns_per_step,
                       inner_clip=inner_clip)
        self.read_after_write, self.inner_scale = read_after_write, inner_scale
        self.w_qkv = torch.cat([params["w_q"], params["w_k"], params["w_v"]])  # [3*H*d, D]
        conv = self.conv_weight = params.get("conv_weight")
        self.conv_taps = None if conv is None else conv.t().contiguous()     # [4, 3*H*d], oldest tap first
        self.gates = {name: (params[f"gate_{name}_w"], params[f"gate_{name}_b"])
                      for name in ("retain", "lr", "momentum") if f"gate_{name}_w" in params}
        self.m0 = params["m0"]
        H, self.d_v, d_phi = self.m0.shape
        self.head_dim = self.w_qkv.size(0) // (3 * heads)
        if H != heads or self.head_dim != d_phi or self.d_v != self.head_dim:
            raise ValueError("identity features and linear memory need m0 [H, d, d] with d = H*d / heads")
        self.weights = self.m0.new_full((heads, 1), inner_scale)  # gamma_{t,t} = 1 (c = 1) times the inner scale
        self.constant = {"retain": 1.0, "momentum": 0.0}

    def initial_state(self):
        """M_0, S_0 = 0 and the conv's last 3 [q|k|v] rows (zeros), as MemoryLayerImpl::initial_state."""
        conv = None if self.conv_taps is None else self.m0.new_zeros(3, self.w_qkv.size(0))
        return self.m0.clone(), torch.zeros_like(self.m0), conv

    def gate(self, name, x):
        """sigmoid(w x + b) per head, x [...,D] -> [...,H] (lr: max_lr times it), or the rule's constant."""
        if name not in self.gates:
            return x.new_full(x.shape[:-1] + (self.heads,), self.constant[name])
        value = torch.sigmoid(torch.nn.functional.linear(x, *self.gates[name]))
        return self.max_lr * value if name == "lr" else value

    def step(self, x_t, state, record=None):
        """One token: x_t [D], state (M, S, conv) -> y_t [H,d_v], new state. With a dict `record`,
        appends this token's phi_k, phi_q, v and gates to its lists (for the check)."""
        M, S, conv = state
        q, k, v, conv = project_token(x_t, conv, self.w_qkv, self.conv_taps, self.heads, self.head_dim)
        phi_q, phi_k = (z / z.norm(dim=-1, keepdim=True).clamp_min(1e-12) for z in (q, k))  # identity phi
        alpha, eta, beta = (self.gate(name, x_t)[:, None, None] for name in ("retain", "lr", "momentum"))
        M_before = M
        M, S = write(self.optimiser, M, S, phi_k[:, None], v[:, None], self.weights, alpha, eta, beta, **self.ns)
        y = torch.bmm(M if self.read_after_write else M_before, phi_q[:, :, None]).squeeze(-1)
        if record is not None:
            for key, value in dict(phi_k=phi_k, phi_q=phi_q, v=v, retain=alpha, lr=eta, momentum=beta).items():
                record.setdefault(key, []).append(value.reshape(self.heads, -1).squeeze(-1))
        return y, (M, S, conv)

    def project(self, x):
        """All T tokens at once (MemoryLayerImpl::project): x [T,D] -> dict of phi_k, phi_q, v [T,H,d]
        and the gates retain, lr, momentum [T,H]. Nothing here depends on the memory (§2, §1)."""
        q, k, v = project_tokens(x, self.w_qkv, self.conv_weight, self.heads, self.head_dim)
        phi_q, phi_k = (z / z.norm(dim=-1, keepdim=True).clamp_min(1e-12) for z in (q, k))  # identity phi
        return dict(phi_k=phi_k, phi_q=phi_q, v=v,
                    **{name: self.gate(name, x) for name in ("retain", "lr", "momentum")})

    def run(self, x, record=False, chunk=None):
        """x [T,D] from a fresh state -> y [T,H,d_v]; with record=True also M and S after every token
        ([T+1,H,...], M_0 and S_0 first) and the per-token inputs the layer computed (dict of [T,H,...]).
        chunk=b: the chunkwise form (§9), project() then run_memory_chunkwise."""
        if chunk is not None:
            if not self.read_after_write:
                raise ValueError("the chunkwise forms here read after the write")
            p = self.project(x)
            inputs = (self.m0, p["phi_k"], p["v"], p["phi_q"], p["retain"], p["lr"], p["momentum"])
            if self.optimiser == "gd-momentum":
                out = run_memory_chunkwise(*inputs, chunk=chunk, inner_scale=self.inner_scale,
                                           inner_clip=self.ns["inner_clip"], record=record)
            else:
                out = run_memory_chunkwise_muon(*inputs, chunk=chunk, ns_steps=self.ns["ns_steps"],
                                                ns_coefficients=self.ns["ns_coefficients"],
                                                ns_per_step=self.ns["ns_per_step"], inner_scale=self.inner_scale,
                                                inner_clip=self.ns["inner_clip"], record=record)
            return (*out, p) if record else out
        state = self.initial_state()
        ys = []
        inputs = {} if record else None
        Ms, Ss = ([state[0]], [state[1]]) if record else (None, None)
        for t in range(x.size(0)):
            y, state = self.step(x[t], state, inputs)
            ys.append(y)
            if record:
                Ms.append(state[0])
                Ss.append(state[1])
        y = torch.stack(ys)
        if record:
            return y, torch.stack(Ms), torch.stack(Ss), {key: torch.stack(v) for key, v in inputs.items()}
        return y


def run_layer(optimiser, params, x, heads, *, record=False, **options):
    """MemoryLayer(params, heads, optimiser, **options).run(x, record): the whole layer over x [T,D]."""
    return MemoryLayer(params, heads, optimiser, **options).run(x, record)
