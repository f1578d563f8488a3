#!/usr/bin/python3
"""demo-mqar's, demo-mqar-titans's and demo-mqar-hope's whole language model in eager PyTorch, token by
token: what a researcher would write instead of memscope's LM step (issue 20's "whole demo-mqar model"
baseline; HOPE's blocks are EagerHopeLM's, below).

The model is memscope's (model/nn/, SPEC): a token embedding, L MAG blocks and a final RMSNorm,
the head tied to the embedding. A MAG block, for the residual stream h:
    n = rms_att(h);  g = sigmoid(W_gate n + b_gate);  a = SWA(n)
    m = W_memory_out · memory(rms_mem(h))          (eager_memory.MemoryLayer.step, or
                                                    WindowedMemoryLayer for Atlas's window and features)
    h = h + g*a + (1-g)*m;  h = h + SwiGLU(rms_ffn(h))
SWA: RoPE on q and k (angles in float64), keys of the last `window` positions (itself included)
plus `persistent` learned tokens that carry no position, softmax(q k^T / sqrt(d_head)) v, then W_o.

It covers what the two presets use: MAG blocks; a linear memory with the l2 bias, l2-decay and
conv; gd-momentum or Muon; an Omega window of c tokens with uniform weights; identity or
polynomial features; the inner clip. It says so in one line when a checkpoint asks for more. Weights come from a memscope
checkpoint (`memscope-cli train --out`), so the two run the same numbers.

    /usr/bin/python3 bench/eager/eager_lm.py --ckpt CKPT --check run.csv   # against memscope's step
    /usr/bin/python3 bench/eager/eager_lm.py --ckpt CKPT --time 512        # tokens/s, one thread
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before torch loads its BLAS
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tomllib  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eager_hope  # noqa: E402
import eager_memory  # noqa: E402
from check_against_trace import read_safetensors  # noqa: E402

RMS_EPS = 1e-6  # model/nn/rms_norm.h


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w


class Attention:
    """Sliding-window attention of one block, batch 1, one token per call (SlidingWindowAttention)."""

    def __init__(self, p, heads, window, rope_base):
        self.w_q, self.w_k, self.w_v, self.w_o = p["w_q"], p["w_k"], p["w_v"], p["w_o"]
        D = self.w_q.size(0)
        self.heads, self.d, self.window = heads, D // heads, window
        half = self.d // 2
        self.inv_freq = rope_base ** (-torch.arange(0, half, dtype=torch.float64) * (2.0 / self.d))
        persistent = p.get("persistent_tokens")
        # Persistent tokens carry no position: their keys and values are fixed, computed once.
        self.pk = None if persistent is None else (persistent @ self.w_k.t()).view(-1, heads, self.d)
        self.pv = None if persistent is None else (persistent @ self.w_v.t()).view(-1, heads, self.d)

    def rope(self, x, position):
        angles = position * self.inv_freq
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x[..., : self.d // 2], x[..., self.d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)

    def step(self, n, cache, position):
        """n [D] -> [D]; cache: (keys, values) [n, H, d] of the last window-1 positions."""
        q = self.rope((n @ self.w_q.t()).view(self.heads, self.d), position)
        k = self.rope((n @ self.w_k.t()).view(self.heads, self.d), position)
        v = (n @ self.w_v.t()).view(self.heads, self.d)
        keys, values = torch.cat([cache[0], k[None]]), torch.cat([cache[1], v[None]])
        cache = (keys[1:], values[1:]) if keys.size(0) >= self.window else (keys, values)
        if self.pk is not None:
            keys, values = torch.cat([self.pk, keys]), torch.cat([self.pv, values])
        scores = torch.einsum("hd,nhd->hn", q, keys) / math.sqrt(self.d)
        out = torch.einsum("hn,nhd->hd", torch.softmax(scores, -1), values).reshape(-1)
        return out @ self.w_o.t(), cache


def settings(config, rule, structures=("linear",), blocks=("mag",)):
    """What this eager model needs from a checkpoint's [model] and [memory] tables, with memscope's
    defaults for the knobs a preset leaves out (model/nn/lm_config.h, model/config/knobs.cpp). Exits
    with one line when the checkpoint uses what eager_lm.py does not implement (structures, blocks:
    the memory structures and block kinds the caller has)."""
    get = lambda table, path, default: _dig(table, path, default)
    allowed = {"structure": structures, "optimiser": ("gd-momentum", "muon"), "retention": ("l2-decay",),
               "bias": ("l2",), "read": ("after-write",), "window.gamma": ("uniform",),
               "feature_map.kind": ("identity", "poly"), "inner.normalize": (False,), "ns.per_step": ([],),
               "momentum.enabled": (True,)}
    defaults = {"structure": "mlp", "optimiser": "gd-momentum", "retention": "l2-decay", "bias": "l2",
                "read": "after-write", "window.gamma": "uniform", "feature_map.kind": "identity",
                "inner.normalize": False, "ns.per_step": [], "momentum.enabled": True}
    unsupported = [f"memory.{k}={get(rule, k, defaults[k])}" for k, ok in allowed.items()
                   if get(rule, k, defaults[k]) not in ok]
    if get(config, "block", "mag") not in blocks or get(config, "ffn", "swiglu") != "swiglu" or not get(config, "ttl", True):
        unsupported.append(f"model.block={get(config, 'block', 'mag')}")
    if unsupported:
        raise SystemExit(f"eager_lm: this checkpoint uses what eager_lm.py does not implement: {', '.join(unsupported)}")
    return {"structure": get(rule, "structure", defaults["structure"]), "max_lr": get(rule, "lr.max", 1.0), "clip": get(rule, "inner.clip", 0.0),
            "optimiser": get(rule, "optimiser", "gd-momentum"), "window_c": get(rule, "window.c", 1),
            "poly": get(rule, "feature_map.kind", "identity") == "poly",
            "ns_steps": get(rule, "ns.steps", 5), "ns_coefficients": tuple(get(rule, "ns.coefficients", eager_memory.MUON_COEFFICIENTS)),
            "block": get(config, "block", "mag"), "memory_heads": get(config, "memory_heads", 2), "window": get(config, "window", 16),
            "attention_heads": get(config, "attention_heads", 2), "rope_base": get(config, "rope_base", 10000.0),
            "layers": get(config, "layers", 2)}


class WindowedMemoryLayer(eager_memory.MemoryLayer):
    """eager_memory.MemoryLayer's step with Atlas's two additions (SPEC §2, §4): the polynomial
    feature map on the L2-normalised keys and queries, sum_i a_i z^i, and an Omega window of the
    last c tokens with uniform weights 1/c (the slots before the sequence start weigh 0)."""

    def __init__(self, params, heads, optimiser, *, window, **options):
        super().__init__(params, heads, optimiser, **options)
        self.window = window
        self.poly = params.get("poly_coefficients")

    def features(self, z):
        return eager_memory.features(z, self.poly)

    def initial_state(self):
        M, S, conv = super().initial_state()
        ring = self.m0.new_zeros(self.heads, self.window - 1, self.head_dim)
        return M, S, conv, ring, ring.clone(), self.m0.new_zeros(self.heads, self.window - 1)

    def step(self, x_t, state, record=None):
        M, S, conv, ring_k, ring_v, ring_w = state
        q, k, v, conv = eager_memory.project_token(x_t, conv, self.w_qkv, self.conv_taps, self.heads, self.head_dim)
        phi_q, phi_k = self.features(q), self.features(k)
        alpha, eta, beta = (self.gate(name, x_t)[:, None, None] for name in ("retain", "lr", "momentum"))
        keys, values = torch.cat([ring_k, phi_k[:, None]], 1), torch.cat([ring_v, v[:, None]], 1)  # [H,c,d]
        present = torch.cat([ring_w, ring_w.new_ones(self.heads, 1)], 1)
        M, S = eager_memory.write(self.optimiser, M, S, keys, values, present / self.window * self.inner_scale,
                                  alpha, eta, beta, **self.ns)
        y = torch.bmm(M, phi_q[:, :, None]).squeeze(-1)
        return y, (M, S, conv, keys[:, 1:], values[:, 1:], present[:, 1:])


class EagerLM:
    def __init__(self, tensors, config, rule):
        """config, rule: the checkpoint's [model] and [memory] tables (settings())."""
        c = settings(config, rule)
        max_lr, clip, heads, window = c["max_lr"], c["clip"], c["memory_heads"], c["window"]
        self.settings = c
        attention_heads, rope_base, layers = c["attention_heads"], c["rope_base"], c["layers"]
        self.embedding = tensors["embedding"]
        self.norm_out = tensors["norm_out.weight"]
        self.blocks = []
        for i in range(layers):
            p = {k[len(f"block{i}."):]: t for k, t in tensors.items() if k.startswith(f"block{i}.")}
            sub = lambda prefix: {k[len(prefix):]: t for k, t in p.items() if k.startswith(prefix)}
            options = dict(max_lr=max_lr, inner_clip=clip, ns_steps=c["ns_steps"], ns_coefficients=c["ns_coefficients"])
            if c["window_c"] > 1 or c["poly"]:
                memory = WindowedMemoryLayer(sub("memory."), heads, c["optimiser"], window=c["window_c"], **options)
            else:
                memory = eager_memory.MemoryLayer(sub("memory."), heads, c["optimiser"], **options)
            self.blocks.append(dict(
                memory=memory, attention=Attention(sub("attention."), attention_heads, window, rope_base),
                w_gate=p["w_gate"], b_gate=p["b_gate"], w_memory_out=p["w_memory_out"],
                norm_attention=p["norm_attention.weight"], norm_memory=p["norm_memory.weight"],
                norm_ffn=p["norm_ffn.weight"], ffn=sub("ffn.")))

    def initial_state(self):
        empty = lambda b: b["attention"].w_k.new_zeros(0, b["attention"].heads, b["attention"].d)
        return {"position": 0, "blocks": [dict(memory=b["memory"].initial_state(), cache=(empty(b), empty(b)))
                                          for b in self.blocks]}

    def step(self, token, state):
        """One token (int) -> logits [V]; state advances."""
        h = self.embedding[token]
        for b, s in zip(self.blocks, state["blocks"]):
            n = rms(h, b["norm_attention"])
            g = torch.sigmoid(n @ b["w_gate"].t() + b["b_gate"])
            a, s["cache"] = b["attention"].step(n, s["cache"], state["position"])
            y, s["memory"] = b["memory"].step(rms(h, b["norm_memory"]), s["memory"])
            m = y.reshape(-1) @ b["w_memory_out"].t()
            h = h + g * a + (1 - g) * m
            n = rms(h, b["norm_ffn"])
            f = b["ffn"]
            h = h + (F.silu(n @ f["w_gate"].t()) * (n @ f["w_up"].t())) @ f["w_down"].t()
        state["position"] += 1
        return rms(h, self.norm_out) @ self.embedding.t()


class EagerHopeLM:
    """demo-mqar-hope's language model token by token: the embedding, L HOPE blocks and the final
    RMSNorm, the head tied to the embedding. A HOPE block (block.cpp), for the residual stream h:
        h = h + W_memory_out · selfmod(rms_mem(h))     (eager_hope.SelfModStep)
        n = rms_ffn(h);  h = h + (CMS(n) − n)           (eager_hope.CmsStep)"""

    def __init__(self, tensors, config, rule, train):
        c = eager_hope.hope_settings(config, rule, train)
        self.settings = c
        self.embedding = tensors["embedding"]
        self.norm_out = tensors["norm_out.weight"]
        self.blocks = []
        for i in range(c["layers"]):
            p = {k[len(f"block{i}."):]: t for k, t in tensors.items() if k.startswith(f"block{i}.")}
            sub = lambda prefix: {k[len(prefix):]: t for k, t in p.items() if k.startswith(prefix)}  # noqa: E731
            self.blocks.append(dict(selfmod=eager_hope.SelfModStep(sub("selfmod."), **c),
                                    cms=eager_hope.CmsStep(sub("cms."), **c), w_memory_out=p["w_memory_out"],
                                    norm_memory=p["norm_memory.weight"], norm_ffn=p["norm_ffn.weight"]))

    def initial_state(self):
        return [dict(selfmod=b["selfmod"].initial_state(), cms=b["cms"].initial_state()) for b in self.blocks]

    def step(self, token, state):
        """One token (int) -> logits [V]; state advances."""
        h = self.embedding[token]
        for b, s in zip(self.blocks, state):
            y, s["selfmod"] = b["selfmod"].step(rms(h, b["norm_memory"]), s["selfmod"])
            h = h + y @ b["w_memory_out"].t()
            n = rms(h, b["norm_ffn"])
            h = h + (b["cms"].step(n, s["cms"]) - n)
        return rms(h, self.norm_out) @ self.embedding.t()


def _dig(table, dotted, default):
    for key in dotted.split("."):
        if not isinstance(table, dict) or key not in table:
            return default
        table = table[key]
    return table


def load(ckpt):
    tensors, metadata = read_safetensors(ckpt)
    config = tomllib.loads(metadata["config"])  # the run's preset, resolved (checkpoint.cpp)
    model = {k[len("model/"):]: t for k, t in tensors.items() if k.startswith("model/")}
    if _dig(config, "model.block", "mag") == "hope":
        return EagerHopeLM(model, config.get("model", {}), config.get("memory", {}), config.get("train", {}))
    return EagerLM(model, config.get("model", {}), config.get("memory", {}))


def check(model, path, tol):
    """memscope's recorded step (`memscope-cli step --record`, exported `--csv`) against ours: the
    same tokens from the same resets, every argmax and every scored loss."""
    rows = [r for r in csv.DictReader(open(path)) if r["kind"] == "inspect"]
    worst, mismatched, scored, sequence = 0.0, 0, 0, None
    with torch.no_grad():
        for r in rows:
            if r["sequence"] != sequence:  # memscope resets the memories at each sequence start
                state, sequence = model.initial_state(), r["sequence"]
            logits = model.step(int(r["token"]), state)
            mismatched += int(logits.argmax()) != int(r["predicted"])
            if r["loss"]:
                ours = float(-torch.log_softmax(logits.double(), -1)[int(r["target"])])
                worst = max(worst, abs(ours - float(r["loss"])) / max(1.0, abs(float(r["loss"]))))
                scored += 1
    result = {"bench": "eager_lm_check", "tokens": len(rows), "scored": scored, "max_rel_loss_error": worst,
              "argmax_mismatches": mismatched, "tol": tol}
    print(json.dumps(result), flush=True)
    return worst <= tol and mismatched == 0 and scored > 0


def time_steps(model, tokens, reps, device, case="model/demo-mqar-titans"):
    torch.set_num_threads(1)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    seconds = []
    with torch.no_grad():
        for r in range(reps + 1):
            state = model.initial_state()
            sync()
            start = time.perf_counter()
            for t in range(tokens):
                model.step(t % model.embedding.size(0), state)
            sync()
            if r:  # the first is a warm-up
                seconds.append(time.perf_counter() - start)
    s = statistics.median(seconds)
    print(json.dumps({"bench": "eager_lm", "case": case, "tokens": tokens,
                      "tokens_per_s": round(tokens / s, 1), "us_per_token": round(1e6 * s / tokens, 2),
                      "median_of": reps, "device": str(device), "torch": torch.__version__}), flush=True)


def to_device(model, device):
    """The model with every tensor it holds (in its blocks, layers and their dicts) on `device`."""
    def moved(value):
        if torch.is_tensor(value):
            return value.to(device)
        if isinstance(value, dict):
            return {k: moved(v) for k, v in value.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(moved(v) for v in value)
        if isinstance(value, (Attention, eager_memory.MemoryLayer, eager_hope.SelfModStep, eager_hope.CmsStep)):
            for attr, v in list(vars(value).items()):
                setattr(value, attr, moved(v))
        return value

    for attr, v in list(vars(model).items()):
        setattr(model, attr, moved(v))
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt", required=True, help="a memscope checkpoint of demo-mqar-titans, demo-mqar or demo-mqar-hope (train --out)")
    p.add_argument("--check", help="the CSV of `memscope-cli export --csv` of a step recorded with that checkpoint")
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--time", type=int, default=0, help="time this many tokens, token by token")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--case", default="model/demo-mqar-titans", help="the name its JSON line gives")
    args = p.parse_args()
    model = load(args.ckpt)
    ok = True
    if args.check:
        ok = check(model, args.check, args.tol)
    if args.time:
        device = torch.device(args.device)
        time_steps(to_device(model, device) if device.type != "cpu" else model, args.time, args.reps, device, args.case)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
