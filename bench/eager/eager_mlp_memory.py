#!/usr/bin/python3
"""The deep (MLP) memory layer in eager PyTorch, token by token, as a researcher would write it: the
inner gradient by torch.autograd.grad on every token. The baseline for memscope's fused MLP step
(model/memory/fused_mlp_step.cpp; issue 20), and a check of it.

The memory of SPEC §3 per head: M(z) = z + LN(W_1 GELU(W_2 z)), W_1 [d,4d], W_2 [4d,d], LN's affine
per head. Per token (SPEC §1, §2, §4-§6): the fused q/k/v projection, the causal conv, phi (L2
normalise, then the polynomial map when the rule has one), the gates, the window loss
L = sum_j gamma_j * 1/2 ||M(phi_j) - v_j||^2 over the last c tokens (uniform weights 1/c, the slots
before the sequence start weigh 0), g = grad_W L (clipped to memory.inner.clip over both weights),
then gd with momentum (S = beta S + eta g, W = alpha W - S) or Muon (S = beta S + g,
W = alpha W - eta NS(S)), and the read y = M(phi_q) after the write.

    /usr/bin/python3 bench/eager/eager_mlp_memory.py --check            # against memscope-cli memory-trace
    /usr/bin/python3 bench/eager/eager_mlp_memory.py --time 256 --reps 3  # tokens/s, one thread, JSON lines
    /usr/bin/python3 bench/eager/eager_mlp_memory.py --time-chunkwise 64 --reps 3  # the chunkwise form

--check runs `memory-trace --parameters` for titans-lmm and atlas (window 4) and compares y_t, W_1 and
W_2 after every token, free-running from the traced parameters and inputs x; then titans-lmm's
chunkwise form (run_chunkwise, chunks of 8) against `memory-trace --chunk 8`: y_t, and W_1 and W_2
after every chunk. Exits 1 above --tol.
--time runs the layer at H = 4, head dim 64 (D = 256), memscope's initialisation, on random x: the
configuration of step_bench's layer/titans-mlp and layer/atlas-mlp rows.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before torch loads its BLAS
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eager_memory  # noqa: E402
from check_against_trace import read_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = {"titans-mlp": ("titans-lmm", []), "atlas-mlp": ("atlas", ["memory.window.c=4"])}
CHECK_CHUNK = 8


class MlpMemoryLayer:
    """One sequence (B = 1), params with memscope's names (memory-trace --parameters)."""

    def __init__(self, params, heads, optimiser, *, window=1, max_lr=1.0, inner_clip=0.0, ns_steps=5,
                 ns_coefficients=eager_memory.MUON_COEFFICIENTS):
        self.heads, self.optimiser, self.window = heads, optimiser, window
        self.max_lr, self.clip = max_lr, inner_clip
        self.ns = dict(steps=ns_steps, coefficients=ns_coefficients)
        self.w_qkv = torch.cat([params["w_q"], params["w_k"], params["w_v"]])  # [3*H*d, D]
        conv = self.conv_weight = params.get("conv_weight")                 # [3*H*d, 4]
        self.conv_taps = None if conv is None else conv.t().contiguous()     # [4, 3*H*d]
        self.gates = {name: (params[f"gate_{name}_w"], params[f"gate_{name}_b"])
                      for name in ("retain", "lr", "momentum") if f"gate_{name}_w" in params}
        self.w1_0, self.w2_0 = params["w1_0"], params["w2_0"]
        self.ln_w, self.ln_b = params["ln_weight"][:, None], params["ln_bias"][:, None]  # [H,1,d]
        self.poly = params.get("poly_coefficients")
        self.head_dim = self.w1_0.size(1)
        self.position = self.w1_0.new_full((window,), 1.0 / window)  # uniform gamma

    def features(self, z):
        return eager_memory.features(z, self.poly)

    def memory(self, z, w1, w2):
        """M(z) for z [H,n,d] with W_1 [H,d,4d], W_2 [H,4d,d]."""
        o = F.gelu(z @ w2.transpose(-1, -2)) @ w1.transpose(-1, -2)
        return z + F.layer_norm(o, o.shape[-1:]) * self.ln_w + self.ln_b

    def gate(self, name, x):
        if name not in self.gates:
            return x.new_full(x.shape[:-1] + (self.heads,), {"retain": 1.0, "momentum": 0.0}[name])
        value = torch.sigmoid(F.linear(x, *self.gates[name]))
        return self.max_lr * value if name == "lr" else value

    def initial_state(self):
        H, d, c = self.heads, self.head_dim, self.window
        zeros = self.w1_0.new_zeros
        conv = None if self.conv_taps is None else zeros(3, self.w_qkv.size(0))
        weights = (self.w1_0.clone(), self.w2_0.clone(), torch.zeros_like(self.w1_0), torch.zeros_like(self.w2_0))
        return (*weights, conv, zeros(H, c - 1, d), zeros(H, c - 1, d), zeros(H, c - 1))

    def step(self, x_t, state):
        W1, W2, S1, S2, conv, ring_k, ring_v, ring_g = state
        q, k, v, conv = eager_memory.project_token(x_t, conv, self.w_qkv, self.conv_taps, self.heads, self.head_dim)
        phi_q, phi_k = self.features(q), self.features(k)
        alpha, eta, beta = (self.gate(name, x_t)[:, None, None] for name in ("retain", "lr", "momentum"))
        keys, values = torch.cat([ring_k, phi_k[:, None]], 1), torch.cat([ring_v, v[:, None]], 1)
        gammas = torch.cat([ring_g, ring_g.new_ones(self.heads, 1)], 1)
        with torch.enable_grad():
            w1, w2 = W1.detach().requires_grad_(), W2.detach().requires_grad_()
            loss = (gammas * self.position * 0.5 * (self.memory(keys, w1, w2) - values).pow(2).sum(-1)).sum()
            g1, g2 = torch.autograd.grad(loss, (w1, w2))
        if self.clip > 0:
            norm = (g1.pow(2).sum((-2, -1)) + g2.pow(2).sum((-2, -1))).clamp_min(1e-30).sqrt()
            factor = (self.clip / norm).clamp_max(1.0)[:, None, None]
            g1, g2 = g1 * factor, g2 * factor
        if self.optimiser == "muon":
            S1, S2 = beta * S1 + g1, beta * S2 + g2
            W1 = alpha * W1 - eta * eager_memory.newton_schulz(S1, self.ns["steps"], self.ns["coefficients"])
            W2 = alpha * W2 - eta * eager_memory.newton_schulz(S2, self.ns["steps"], self.ns["coefficients"])
        else:
            S1, S2 = beta * S1 + eta * g1, beta * S2 + eta * g2
            W1, W2 = alpha * W1 - S1, alpha * W2 - S2
        y = self.memory(phi_q[:, None], W1, W2)[:, 0]
        return y, (W1, W2, S1, S2, conv, keys[:, 1:], values[:, 1:], gammas[:, 1:])

    def project(self, x):
        """phi_q, phi_k, v [T,H,d] and the gates [T,H] for all T tokens at once."""
        q, k, v = eager_memory.project_tokens(x, self.w_qkv, self.conv_weight, self.heads, self.head_dim)
        return self.features(q), self.features(k), v, [self.gate(name, x) for name in ("retain", "lr", "momentum")]

    def run_chunkwise(self, x, chunk, record_ends=False):
        """The chunkwise form (SPEC §9) of gd with momentum at window c = 1 over one sequence x [T,D]
        (mlp_chunkwise, the heads as its groups). Returns y [T,H,d], and with record_ends the weights
        (W_1, W_2) after every chunk."""
        if self.window != 1 or self.optimiser == "muon":
            raise ValueError("the eager chunkwise MLP form has gd-momentum at window 1 only")
        phi_q, phi_k, v, gates = self.project(x)
        heads_first = lambda z: z.transpose(0, 1)  # noqa: E731  [T,H,...] -> [H,T,...]
        y, ends = mlp_chunkwise(self.w1_0, self.w2_0, self.ln_w, self.ln_b, heads_first(phi_k), heads_first(v),
                                heads_first(phi_q), *map(heads_first, gates), chunk=chunk, clip=self.clip)
        return (heads_first(y), ends) if record_ends else heads_first(y)

    def run(self, x, record=False):
        state, ys, w1s, w2s = self.initial_state(), [], [], []
        for t in range(x.size(0)):
            y, state = self.step(x[t], state)
            ys.append(y)
            if record:
                w1s.append(state[0])
                w2s.append(state[1])
        return (torch.stack(ys), torch.stack(w1s), torch.stack(w2s)) if record else torch.stack(ys)


def exact_gelu(h):
    """GELU(h) = h Phi(h) = 1/2 h (1 + erf(h / sqrt 2)), F.gelu's value, with a backward that stays
    right for any layout (mlp_chunkwise says why)."""
    return 0.5 * h * (1.0 + torch.erf(h * 0.7071067811865476))


def key_factors(k, val, W1, W2, ln_w, ln_b, gelu, create_graph, scale=1.0, with_read=False):
    """Every key's pass at the chunk start's weights and the factors of its inner gradient, by one
    torch.autograd.grad to the activations: a = GELU(W_2 k), dL/dh and dL/do for the l2 loss
    L = scale sum 1/2 |M(k) - v|^2, so that grad W_1 = do a^T and grad W_2 = dh k^T per key; with
    with_read, M(k) too, after a."""
    with torch.enable_grad():
        h = k @ W2.transpose(-1, -2)
        if not h.requires_grad:
            h.requires_grad_()
        a = gelu(h)
        o = a @ W1.transpose(-1, -2)
        y_k = k + F.layer_norm(o, o.shape[-1:]) * ln_w + ln_b
        d_h, d_o = torch.autograd.grad(scale * 0.5 * (y_k - val).pow(2).sum(), (h, o), create_graph=create_graph)
    return (a, y_k, d_h, d_o) if with_read else (a, d_h, d_o)


def mlp_chunkwise(w1_0, w2_0, ln_w, ln_b, phi_k, v, phi_q, retain, lr, momentum, *, chunk, clip=0.0,
                  differentiable=False):
    """The MLP memory's chunkwise form (SPEC §9) of gd with momentum at window c = 1, as eager
    PyTorch, for G independent memories (heads, or sequences times heads): phi_k, v, phi_q [G,T,d],
    the gates [G,T], W_1 [G,d,4d], W_2 [G,4d,d] at the start, the LN affine [G,1,d]. Chunks of `chunk`
    tokens from the start. Every gradient of a chunk is taken at the chunk start's weights, so the
    per-token gradient factors come from one torch.autograd.grad to the activations (dL/dh, dL/do:
    grad W_1 = do a^T, grad W_2 = dh k^T), and the momentum and retention scans are solved with
    eager_memory.decay_matrix, as eager_memory.run_memory_chunkwise does for the linear memory. The read
    needs W_t only through products with q_t and GELU(W_2,t q_t), so no per-token weight is built (the
    dual form):
        W_2,t q = Pa_t W_2 q - c_t S_2 q - sum_r A[t,r] (k_r . q) dh_r,   and W_1,t a likewise.
    differentiable: the inner gradient with create_graph, so that an outer loss can be taken through
    it, as a researcher trains this memory (bench/eager/eager_lm_train.py). GELU is then written out
    with erf: in LibTorch 1.13, F.gelu's backward on the CPU returns garbage when its incoming gradient
    and its input have different layouts, which the outer backward through the inner one produces
    (model/memory/mlp_memory.cpp's exact_gelu says the same; here it gave gradient norms of 1e15-inf).
    Returns y [G,T,d] and the weights (W_1, W_2) after every chunk."""
    gelu = exact_gelu if differentiable else F.gelu
    b = chunk
    W1, W2 = w1_0, w2_0
    S1, S2 = torch.zeros_like(W1), torch.zeros_like(W2)
    ys, ends = [], []
    # The chunks by one split per input ([G,n,...] each): a slice per chunk would cost autograd's
    # backward a zero-filled gradient of the whole sequence for every chunk.
    for k, q, val, alpha, eta, beta in zip(*(z.split(b, 1) for z in (phi_k, phi_q, v, retain, lr, momentum))):
        a, d_h, d_o = key_factors(k, val, W1, W2, ln_w, ln_b, gelu, differentiable)
        if not differentiable:
            a = a.detach()
        if clip > 0:  # |g_t|^2 = |do|^2 |a|^2 + |dh|^2 |k|^2
            norm = (d_o.pow(2).sum(-1) * a.pow(2).sum(-1) + d_h.pow(2).sum(-1) * k.pow(2).sum(-1)).sqrt()
            factor = (clip / norm.clamp_min(1e-30)).clamp_max(1.0)[..., None]
            d_o, d_h = d_o * factor, d_h * factor
        Da, Db = eager_memory.decay_matrix(alpha), eager_memory.decay_matrix(beta)  # [G,n,n]
        Pa, Pb = alpha.cumprod(-1), beta.cumprod(-1)
        A = (Da @ Db) * eta[..., None, :]
        c = (Da @ Pb[..., None])[..., 0]
        h_q = (Pa[..., None] * (q @ W2.transpose(-1, -2)) - c[..., None] * (q @ S2.transpose(-1, -2))
               - (A * (q @ k.transpose(-1, -2))) @ d_h)
        a_q = gelu(h_q)
        o_q = (Pa[..., None] * (a_q @ W1.transpose(-1, -2)) - c[..., None] * (a_q @ S1.transpose(-1, -2))
               - (A * (a_q @ a.transpose(-1, -2))) @ d_o)
        ys.append(q + F.layer_norm(o_q, o_q.shape[-1:]) * ln_w + ln_b)
        last, to_s = A[:, -1, :, None], (Db[:, -1] * eta)[..., None]  # [G,n,1]
        keep, from_s, s_keep = Pa[:, -1, None, None], c[:, -1, None, None], Pb[:, -1, None, None]
        W1, W2, S1, S2 = (keep * W1 - from_s * S1 - (d_o * last).transpose(-1, -2) @ a,
                          keep * W2 - from_s * S2 - (d_h * last).transpose(-1, -2) @ k,
                          s_keep * S1 + (d_o * to_s).transpose(-1, -2) @ a,
                          s_keep * S2 + (d_h * to_s).transpose(-1, -2) @ k)
        ends.append((W1, W2))
    return torch.cat(ys, 1), ends


def mlp_chunkwise_muon(w1_0, w2_0, ln_w, ln_b, phi_k, v, phi_q, retain, lr, momentum, *, chunk, window, clip=0.0,
                       ns_steps=5, ns_coefficients=eager_memory.MUON_COEFFICIENTS):
    """Atlas's rule on the MLP memory in the chunkwise form (SPEC §9), as a researcher trains it in
    eager PyTorch: G independent memories, inputs as mlp_chunkwise's, an Omega window of `window`
    slots with uniform weights 1/c (the slots before the sequence start weigh 0), Muon. Inside a
    chunk every gradient is taken at the chunk start's weights: one pass over the chunk's keys and
    the c - 1 before them, their factors dL/dh, dL/do by torch.autograd.grad with create_graph, and
    token t's gradient the weighted sum over its window's slots, g_1,t = sum_j w_tj do_j a_j^T and
    g_2,t = sum_j w_tj dh_j k_j^T, built per token (clipped per token over both weights). The
    momentum S_t = beta_t S_t-1 + g_t is a linear scan (eager_memory.decay_matrix), but
    Newton-Schulz is not linear, so every S_t is built and orthogonalised in one batched
    eager_memory.newton_schulz, and W_t = alpha_t W_t-1 - eta_t NS(S_t) is the retention scan over
    those; the read y_t = M_t(q_t) after the write takes every token's own W_t. What memscope's
    materialised chunkwise path computes (chunkwise_forward.cpp). Returns y [G,T,d]."""
    G, T, _ = phi_k.shape
    c, b = window, chunk
    pad = lambda z: torch.cat([z.new_zeros(G, c - 1, *z.shape[2:]), z], 1)  # noqa: E731
    keys, values, real = pad(phi_k), pad(v), pad(phi_k.new_ones(G, T))   # [G,T+c-1,...]
    windows = lambda z: z.unfold(1, c, 1).movedim(-1, 2)  # noqa: E731  [G,n+c-1,...] -> [G,n,c,...]
    ns = lambda s: eager_memory.newton_schulz(s.flatten(0, 1), ns_steps, ns_coefficients).view_as(s)  # noqa: E731
    W1, W2 = w1_0, w2_0
    S1, S2 = torch.zeros_like(W1), torch.zeros_like(W2)
    ys = []
    for start in range(0, T, b):
        n = min(b, T - start)
        k_ext, v_ext = keys[:, start:start + n + c - 1], values[:, start:start + n + c - 1]
        q, alpha, eta, beta = (z[:, start:start + n] for z in (phi_q, retain, lr, momentum))
        a, d_h, d_o = key_factors(k_ext, v_ext, W1, W2, ln_w, ln_b, exact_gelu, True)
        w = windows(real[:, start:start + n + c - 1]) / c                               # [G,n,c]
        g1 = torch.einsum("gtj,gtjd,gtje->gtde", w, windows(d_o), windows(a))          # [G,n,d,4d]
        g2 = torch.einsum("gtj,gtje,gtjd->gted", w, windows(d_h), windows(k_ext))      # [G,n,4d,d]
        if clip > 0:
            norm = (g1.pow(2).sum((-2, -1)) + g2.pow(2).sum((-2, -1))).sqrt()
            factor = (clip / norm.clamp_min(1e-30)).clamp_max(1.0)[..., None, None]
            g1, g2 = g1 * factor, g2 * factor
        Da, Db = eager_memory.decay_matrix(alpha), eager_memory.decay_matrix(beta)     # [G,n,n]
        Pa, Pb = alpha.cumprod(-1)[..., None, None], beta.cumprod(-1)[..., None, None]
        S1_t = Pb * S1[:, None] + torch.einsum("gtr,grde->gtde", Db, g1)
        S2_t = Pb * S2[:, None] + torch.einsum("gtr,grde->gtde", Db, g2)
        U1, U2 = eta[..., None, None] * ns(S1_t), eta[..., None, None] * ns(S2_t)
        W1_t = Pa * W1[:, None] - torch.einsum("gts,gsde->gtde", Da, U1)
        W2_t = Pa * W2[:, None] - torch.einsum("gts,gsde->gtde", Da, U2)
        h_q = (q[:, :, None] @ W2_t.transpose(-1, -2))[:, :, 0]                        # [G,n,4d]
        o_q = (exact_gelu(h_q)[:, :, None] @ W1_t.transpose(-1, -2))[:, :, 0]          # [G,n,d]
        ys.append(q + F.layer_norm(o_q, o_q.shape[-1:]) * ln_w + ln_b)
        W1, W2, S1, S2 = W1_t[:, -1], W2_t[:, -1], S1_t[:, -1], S2_t[:, -1]
    return torch.cat(ys, 1)


def layer_for(params, rule):
    m = rule["memory"]
    return MlpMemoryLayer(params, int(params["w1_0"].size(0)), m["optimiser"], window=m["window"]["c"],
                          max_lr=m["lr"]["max"], inner_clip=m["inner"]["clip"], ns_steps=m["ns"]["steps"],
                          ns_coefficients=tuple(m["ns"]["coefficients"]))


def check(args):
    worst = 0.0
    with tempfile.TemporaryDirectory() as workdir:
        for name, (preset, sets) in RULES.items():
            out = os.path.join(workdir, name + ".safetensors")
            cmd = [args.cli, "memory-trace", "--preset", preset, "--tokens", str(args.tokens), "--heads", "2",
                   "--dim", "32", "--seed", "1", "--parameters", "--out", out]
            for s in sets:
                cmd += ["--set", s]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            tr, meta = read_safetensors(out)
            rule = json.loads(meta["rule"])
            params = {k[len("param/"):]: v for k, v in tr.items() if k.startswith("param/")}
            y, w1, w2 = layer_for(params, rule).run(tr["x"], record=True)
            errors = {}
            for key, mine, ref in (("y", y, tr["y"]), ("W1", w1, tr["W1"][1:]), ("W2", w2, tr["W2"][1:])):
                errors[key] = ((mine - ref).abs().max() / ref.abs().max()).item()
            worst = max(worst, *errors.values())
            print(json.dumps({"bench": "eager_mlp_check", "rule": name, "tokens": args.tokens,
                              "rel_error": errors, "tol": args.tol}))
        # The chunkwise form against memscope's (memory-trace --chunk: the materialised form, which
        # tests/model/test_fused_mlp_chunkwise.cpp holds equal to the fused one), Titans' rule.
        out = os.path.join(workdir, "titans-mlp-chunkwise.safetensors")
        subprocess.run([args.cli, "memory-trace", "--preset", "titans-lmm", "--tokens", str(args.tokens),
                        "--heads", "2", "--dim", "32", "--seed", "1", "--parameters", "--chunk", str(CHECK_CHUNK),
                        "--out", out], check=True, stdout=subprocess.DEVNULL)
        tr, meta = read_safetensors(out)
        params = {k[len("param/"):]: v for k, v in tr.items() if k.startswith("param/")}
        layer = layer_for(params, json.loads(meta["rule"]))
        y, ends = layer.run_chunkwise(tr["x"], CHECK_CHUNK, record_ends=True)
        after = [min(i + CHECK_CHUNK, args.tokens) for i in range(0, args.tokens, CHECK_CHUNK)]  # trace rows
        errors = {"y": ((y - tr["y"]).abs().max() / tr["y"].abs().max()).item()}
        for i, key in enumerate(("W1", "W2")):
            ref = tr[key][after]
            errors[key] = ((torch.stack([e[i] for e in ends]) - ref).abs().max() / ref.abs().max()).item()
        worst = max(worst, *errors.values())
        print(json.dumps({"bench": "eager_mlp_check", "rule": "titans-mlp", "form": "chunkwise",
                          "chunk": CHECK_CHUNK, "tokens": args.tokens, "rel_error": errors, "tol": args.tol}))
    return 0 if worst <= args.tol else 1


def random_params(generator, H, d, conv=True):
    """A layer at H heads of dimension d (D = H d, hidden 4d) with memscope's initialisation."""
    D, W, hidden = H * d, H * d, 4 * d
    rand = lambda *shape: torch.randn(*shape, generator=generator)  # noqa: E731
    params = {n: rand(W, D) / D ** 0.5 for n in ("w_q", "w_k", "w_v")}
    if conv:
        params["conv_weight"] = 0.1 * rand(3 * W, 4)
        params["conv_weight"][:, 3] = 1.0
    for gate, bias in (("retain", 3.0), ("lr", -2.0), ("momentum", 1.0)):
        params[f"gate_{gate}_w"], params[f"gate_{gate}_b"] = rand(H, D) / D ** 0.5, torch.full((H,), bias)
    params["w1_0"], params["w2_0"] = rand(H, d, hidden) / hidden ** 0.5, rand(H, hidden, d) / d ** 0.5
    params["ln_weight"], params["ln_bias"] = torch.ones(H, d), torch.zeros(H, d)
    return params


def time_layers(args):
    H, d = 4, 64
    generator = torch.Generator().manual_seed(0)
    for name, (preset, _) in RULES.items():
        muon = name == "atlas-mlp"
        T = args.time // 8 if muon else args.time  # Muon's NS on 64x256 weights is ~100x gd's step
        rand = lambda *shape: torch.randn(*shape, generator=generator)  # noqa: E731
        params = random_params(generator, H, d)
        window = 8 if muon else 1
        if muon:
            params["poly_coefficients"] = torch.tensor([1.0, 0.5])
        layer = MlpMemoryLayer(params, H, "muon" if muon else "gd-momentum", window=window)
        x = rand(T, H * d)
        with torch.no_grad():
            layer.run(x[: min(T, 16)])  # warm-up
            times = []
            for _ in range(args.reps):
                start = time.perf_counter()
                layer.run(x)
                times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        print(json.dumps({"bench": "eager_mlp_layer", "rule": name, "tokens": T, "heads": H, "head_dim": d,
                          "window": window, "tokens_per_s": T / seconds, "us_per_token": 1e6 * seconds / T,
                          "median_of": args.reps}))


def chunkwise_flops_per_token(b, H, d):
    """The matmul FLOPs of run_chunkwise per token (memory_bench's count for memscope's fused form,
    fused_mlp_chunkwise.cpp, plus the [b,b] decay products): per head and chunk of b tokens, hidden
    4d, the keys' pass and backward (three d x 4d products), the read (k.q and a.a_q, the W and S
    terms of both weights, the two dh/do sums), the chunk end's W and S of both weights, Da Db and
    Da Pb. Not counted: the projections and gates, GELU, LN, the elementwise coefficients."""
    n, hidden = b, 4 * d
    keys = 3 * 2 * hidden * d * n
    read = (2 * n * d * n + 4 * hidden * d * n + 2 * hidden * n * n + 2 * n * hidden * n + 4 * d * hidden * n
            + 2 * d * n * n)
    end = 4 * 2 * d * hidden * n
    return H * (keys + read + end + 2 * n ** 3 + 2 * n * n) / n


def time_chunkwise(args):
    """run_chunkwise at memory_bench's MLP row (`--only mlp --c 1 --optimiser gd-momentum --chunk b`:
    preset omeganet with the MLP memory, identity features, window 1, l2-decay; conv off), H = 4,
    head dim 64, T = 2048."""
    H, d, T, b = 4, 64, 2048, args.time_chunkwise
    generator = torch.Generator().manual_seed(0)
    layer = MlpMemoryLayer(random_params(generator, H, d, conv=False), H, "gd-momentum")
    x = torch.randn(T, H * d, generator=generator)
    with torch.no_grad():
        layer.run_chunkwise(x[:2 * b], b)  # warm-up
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            layer.run_chunkwise(x, b)
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    print(json.dumps({"bench": "eager_mlp_chunkwise", "rule": "titans-mlp", "chunk": b, "tokens": T,
                      "heads": H, "head_dim": d, "tokens_per_s": T / seconds,
                      "gflops": chunkwise_flops_per_token(b, H, d) * T / seconds / 1e9,
                      "median_of": args.reps}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true")
    p.add_argument("--time", type=int, default=0, help="tokens per timed run (Muon: an eighth)")
    p.add_argument("--time-chunkwise", type=int, default=0, metavar="B",
                   help="time the chunkwise form with chunks of B at T = 2048")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--tokens", type=int, default=40, help="--check: tokens traced")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--cli", default=os.path.join(ROOT, "build/app/cli/memscope-cli"))
    args = p.parse_args()
    torch.set_num_threads(1)
    rc = check(args) if args.check else 0
    if args.time:
        time_layers(args)
    if args.time_chunkwise:
        time_chunkwise(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
