#!/usr/bin/python3
"""demo-mqar-titans's, demo-mqar-titans-mlp's, demo-mqar-atlas-mlp's and demo-mqar-hope's training
steps in eager PyTorch: what a researcher would write instead of memscope's Trainer (issue 20's
"demo-mqar training step" baseline, and the deep memories').

The model of eager_lm.py over whole sequences [B,T]: MAG blocks (the attention with a causal window
mask beside the memory) or LMM blocks (the memory alone), the memory layer batched over all tokens
and sequences (batch and heads folded together, chunks of train.chunk from each sequence's start)
in the §9 chunkwise form: eager_memory.run_memory_chunkwise for the linear memory (the dual form),
eager_mlp_memory.mlp_chunkwise for the MLP memory (its inner gradient by torch.autograd.grad with
create_graph, so the outer backward goes through it), eager_mlp_memory.mlp_chunkwise_muon for Atlas's
rule on the MLP memory (Muon, an Omega window, polynomial features); then the task loss (summed
cross-entropy over the scored targets / their count), autograd, clip_grad_norm_ and
torch.optim.AdamW. Titans' rule (gd-momentum at window 1 with identity features) on either memory,
or Atlas's on the MLP memory.

HOPE blocks (model.block = "hope", block.cpp): the self-modifying memory on the RMS-normed stream
(eager_hope.selfmod_chunkwise, chunks of train.chunk) through w_memory_out, then the CMS in the FFN's
place (eager_hope.cms), h + (CMS(n) - n); the objective adds model.hope.aux_weight times the
auxiliary retrieval loss per token and sequence (trainer.cpp), while the loss checked and printed is
the task loss alone, as `train --json` reports it.

    # against memscope's step S (`step --train-step S --record`, exported --csv) and the loss and
    # gradient norm `train --json` printed for S, with the weights from before S:
    /usr/bin/python3 bench/eager/eager_lm_train.py --ckpt CKPT --batch-csv ts.csv --chunk 4 \\
        --check-loss 4.31991 --check-grad-norm 4.67141
    /usr/bin/python3 bench/eager/eager_lm_train.py --ckpt CKPT --batch-csv ts.csv --chunk 4 --time 20
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
import eager_mlp_memory  # noqa: E402
from check_against_trace import read_safetensors  # noqa: E402
from eager_lm import _dig, rms, settings  # noqa: E402

IGNORE = -100  # model/data/batch.h kIgnoreIndex


class EagerTrainLM:
    def __init__(self, tensors, config, rule, train=None):
        self.params = {name: t.clone().requires_grad_(True) for name, t in tensors.items()}
        # HOPE blocks: eager_hope's self-modifying memory and CMS; the memory rule gives them only
        # their inner lr ceiling and clip.
        self.hope = None
        if _dig(config, "block", "mag") == "hope":
            self.hope = eager_hope.hope_settings(config, rule, train or {})
            return
        self.c = settings(config, rule, structures=("linear", "mlp"), blocks=("mag", "lmm"))
        titans = self.c["optimiser"] == "gd-momentum" and self.c["window_c"] == 1 and not self.c["poly"]
        atlas_mlp = self.c["optimiser"] == "muon" and self.c["structure"] == "mlp"
        if not (titans or atlas_mlp):
            # eager_memory.run_memory_chunkwise and eager_mlp_memory.mlp_chunkwise are Titans' rule
            # (c = 1, identity features); eager_mlp_memory.mlp_chunkwise_muon is Atlas's on the MLP
            # memory (Muon, any window, polynomial features).
            raise SystemExit("eager_lm_train: the chunkwise forms here are Titans' rule (gd-momentum at c = 1 "
                             "with identity features) and Atlas's on the MLP memory; this checkpoint's memory "
                             "is neither")

    def memory(self, p, x, chunk):
        """The memory layer over x [B,T,D] -> [B,T,H*d] (eager_memory.MemoryLayer.project, batched)."""
        B, T, _ = x.shape
        H = self.c["memory_heads"]
        qkv = F.linear(x, torch.cat([p["w_q"], p["w_k"], p["w_v"]]))          # [B,T,3W]
        if "conv_weight" in p:  # §2 depthwise causal conv, width 4
            qkv = F.conv1d(qkv.transpose(1, 2), p["conv_weight"][:, None], padding=3,
                           groups=qkv.size(-1))[..., :T].transpose(1, 2)
        q, k, v = qkv.view(B, T, 3, H, -1).unbind(2)
        unit = lambda z: eager_memory.features(z, p.get("poly_coefficients"))  # φ: L2 norm, then the poly map
        gate = lambda name: torch.sigmoid(F.linear(x, p[f"gate_{name}_w"], p[f"gate_{name}_b"]))  # [B,T,H]
        if self.c["structure"] == "mlp":  # the deep memory: [B,T,H,...] -> [B*H,T,...], sequences as more heads
            groups = lambda z: z.transpose(1, 2).reshape(B * H, T, *z.shape[3:])
            per_group = lambda w: w.repeat(B, *([1] * (w.dim() - 1)))
            if self.c["optimiser"] == "muon":
                y = eager_mlp_memory.mlp_chunkwise_muon(
                    per_group(p["w1_0"]), per_group(p["w2_0"]), per_group(p["ln_weight"][:, None]),
                    per_group(p["ln_bias"][:, None]), groups(unit(k)), groups(v), groups(unit(q)),
                    groups(gate("retain")), groups(self.c["max_lr"] * gate("lr")), groups(gate("momentum")),
                    chunk=chunk, window=self.c["window_c"], clip=self.c["clip"], ns_steps=self.c["ns_steps"],
                    ns_coefficients=self.c["ns_coefficients"])
                return y.view(B, H, T, -1).transpose(1, 2).reshape(B, T, -1)
            y, _ = eager_mlp_memory.mlp_chunkwise(
                per_group(p["w1_0"]), per_group(p["w2_0"]), per_group(p["ln_weight"][:, None]),
                per_group(p["ln_bias"][:, None]), groups(unit(k)), groups(v), groups(unit(q)),
                groups(gate("retain")), groups(self.c["max_lr"] * gate("lr")), groups(gate("momentum")),
                chunk=chunk, clip=self.c["clip"], differentiable=True)
            return y.view(B, H, T, -1).transpose(1, 2).reshape(B, T, -1)
        fold = lambda z: z.transpose(0, 1).reshape(T, B * H, *z.shape[3:])     # sequences as more heads
        y = eager_memory.run_memory_chunkwise(
            p["m0"].repeat(B, 1, 1), fold(unit(k)), fold(v), fold(unit(q)), fold(gate("retain")),
            fold(self.c["max_lr"] * gate("lr")), fold(gate("momentum")), chunk=chunk, inner_clip=self.c["clip"])
        return y.view(T, B, -1).transpose(0, 1)

    def attention(self, p, n):
        """Sliding-window attention over n [B,T,D] from position 0 (SlidingWindowAttention::forward)."""
        B, T, D = n.shape
        H = self.c["attention_heads"]
        d, W = D // H, self.c["window"]
        on = dict(device=n.device)
        inv = self.c["rope_base"] ** (-torch.arange(0, d // 2, dtype=torch.float64, **on) * (2.0 / d))
        angles = torch.arange(T, dtype=torch.float64, **on)[:, None] * inv
        cos, sin = angles.cos().to(n.dtype), angles.sin().to(n.dtype)
        heads = lambda z: z.reshape(z.size(0), -1, H, d).transpose(1, 2)       # [B,H,*,d]

        def rope(z):
            z1, z2 = z[..., : d // 2], z[..., d // 2:]
            return torch.cat([z1 * cos - z2 * sin, z1 * sin + z2 * cos], -1)

        q, k, v = rope(heads(n @ p["w_q"].t())), rope(heads(n @ p["w_k"].t())), heads(n @ p["w_v"].t())
        t = torch.arange(T, **on)
        visible = (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - W)
        if "persistent_tokens" in p:  # no position: every query sees them
            P = p["persistent_tokens"]
            k = torch.cat([heads((P @ p["w_k"].t())[None]).expand(B, -1, -1, -1), k], 2)
            v = torch.cat([heads((P @ p["w_v"].t())[None]).expand(B, -1, -1, -1), v], 2)
            visible = torch.cat([torch.ones(T, P.size(0), dtype=torch.bool, **on), visible], 1)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(~visible, float("-inf"))
        out = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T, D)
        return out @ p["w_o"].t()

    def hope_block(self, p, h, chunk):
        """A HOPE block (block.cpp): the self-modifying memory on the normed stream through
        w_memory_out, then the CMS in the FFN's place, h + (CMS(n) - n). Returns h and the block's
        auxiliary retrieval loss (summed over sequences and tokens)."""
        c = self.hope
        sub = lambda prefix: {k[len(prefix):]: t for k, t in p.items() if k.startswith(prefix)}  # noqa: E731
        # Under --bf16 the memories stay in the weights' dtype, as memscope keeps them (AutocastOff):
        # every product there reads or writes a memory.
        dtype = p["norm_memory.weight"].dtype
        with torch.autocast(h.device.type, enabled=False):
            y, aux = eager_hope.selfmod_chunkwise(
                sub("selfmod."), rms(h, p["norm_memory.weight"]).to(dtype), chunk=chunk, max_lr=c["max_lr"],
                clip=c["clip"], conv=c["conv"], shared_gates=c["shared_gates"], self_lr_scale=c["self_lr_scale"])
        h = h + y @ p["w_memory_out"].t()
        n = rms(h, p["norm_ffn.weight"])
        with torch.autocast(h.device.type, enabled=False):
            levels = eager_hope.cms(sub("cms."), n.to(dtype), periods=c["periods"], variant=c["variant"],
                                    max_lr=c["max_lr"], clip=c["clip"])
        return h + (levels - n), aux

    def forward(self, tokens, chunk):
        """tokens [B,T] -> logits [B,T,V] and HOPE's auxiliary loss (0 without HOPE blocks); every
        sequence from a fresh state (memscope's trainer)."""
        P = self.params
        h = P["embedding"][tokens]
        aux = 0.0
        for i in range(self.hope["layers"] if self.hope else self.c["layers"]):
            p = {k[len(f"block{i}."):]: t for k, t in P.items() if k.startswith(f"block{i}.")}
            if self.hope:
                h, block_aux = self.hope_block(p, h, chunk)
                aux = aux + block_aux
                continue
            sub = lambda prefix: {k[len(prefix):]: t for k, t in p.items() if k.startswith(prefix)}
            m = self.memory(sub("memory."), rms(h, p["norm_memory.weight"]), chunk) @ p["w_memory_out"].t()
            if self.c["block"] == "lmm":  # the memory alone (block.cpp)
                h = h + m
            else:  # mag: gated beside the attention
                n = rms(h, p["norm_attention.weight"])
                g = torch.sigmoid(n @ p["w_gate"].t() + p["b_gate"])
                h = h + g * self.attention(sub("attention."), n) + (1 - g) * m
            n = rms(h, p["norm_ffn.weight"])
            h = h + (F.silu(n @ p["ffn.w_gate"].t()) * (n @ p["ffn.w_up"].t())) @ p["ffn.w_down"].t()
        return rms(h, P["norm_out.weight"]) @ P["embedding"].t(), aux

    def loss(self, tokens, targets, chunk):
        """The task loss (what `train --json` reports) and the objective the step differentiates: the
        task loss, plus for HOPE model.hope.aux_weight times the auxiliary loss per token and
        sequence (trainer.cpp)."""
        logits, aux = self.forward(tokens, chunk)
        count = max(1, int((targets != IGNORE).sum()))
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE,
                               reduction="sum") / count
        if not self.hope:
            return loss, loss
        return loss, loss + self.hope["aux_weight"] * aux / tokens.numel()


def batch_from_csv(path):
    """The batch of a recorded step into a training step: one sequence per row, in order."""
    rows = [r for r in csv.DictReader(open(path)) if r["kind"] == "inspect"]
    by_row = {}
    for r in rows:
        by_row.setdefault(int(r["sequence"]), []).append(r)
    tokens = [[int(r["token"]) for r in by_row[s]] for s in sorted(by_row)]
    targets = [[int(r["target"]) if int(r["target"]) >= 0 else IGNORE for r in by_row[s]] for s in sorted(by_row)]
    return torch.tensor(tokens), torch.tensor(targets)


def aten_calls(work):
    """The ATen calls `work` makes, as bench/aten_call_count.h counts memscope's, so the two compare:
    every op and autograd node ("aten_calls_nested"), and those made while no other op runs on that
    thread ("aten_calls": the ones the step's own code and autograd's engine call; on a GPU each that
    computes is about one kernel launch). Ranges a user marks (the optimiser's "Optimizer.step#…")
    are not ops: aten_call_count.h does not see them, so they are skipped here and their ops are
    counted as top level."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        work()
    marked = lambda e: "#" in e.name or e.name.startswith(("##", "Optimizer.", "ProfilerStep"))
    ops = [e for e in prof.events() if not marked(e)]

    def top_level(e):
        p = e.cpu_parent
        while p is not None and marked(p):
            p = p.cpu_parent
        return p is None

    return {"aten_calls": sum(map(top_level, ops)), "aten_calls_nested": len(ops)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt", required=True, help="memscope checkpoint: the weights before the step")
    p.add_argument("--batch-csv", help="`memscope-cli export --csv` of `step --train-step S --record`")
    p.add_argument("--random-batch", help="B,T: a batch of uniform tokens instead (timing only: the same work)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--case", default="train/demo-mqar-titans")
    p.add_argument("--bf16", action="store_true", help="the forward under torch.autocast(bfloat16)")
    p.add_argument("--chunk", type=int, default=4, help="train.chunk")
    p.add_argument("--check-loss", type=float)
    p.add_argument("--check-grad-norm", type=float)
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--time", type=int, default=0, help="time this many training steps (after 2 warm-up steps)")
    p.add_argument("--profile", help="after --time: one more step under torch.profiler, its Chrome trace to this "
                                     "path (bench/eager/trace_summary.py)")
    p.add_argument("--count-aten", action="store_true",
                   help="after --time: one more step's ATen calls, counted as bench/aten_call_count.h counts memscope's")
    args = p.parse_args()
    torch.set_num_threads(1)
    tensors, metadata = read_safetensors(args.ckpt)
    config = tomllib.loads(metadata["config"])
    model = EagerTrainLM({k[len("model/"):]: t for k, t in tensors.items() if k.startswith("model/")},
                         config.get("model", {}), config.get("memory", {}), config.get("train", {}))
    if args.random_batch:
        b, t = (int(x) for x in args.random_batch.split(","))
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, model.params["embedding"].size(0), (b, t), generator=g)
        targets = tokens.roll(-1, 1)
    else:
        tokens, targets = batch_from_csv(args.batch_csv)
    device = torch.device(args.device)
    if device.type != "cpu":
        model.params = {k: t.detach().to(device).requires_grad_(True) for k, t in model.params.items()}
        tokens, targets = tokens.to(device), targets.to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    ok = True
    if args.check_loss is not None:
        loss, objective = model.loss(tokens, targets, args.chunk)
        objective.backward()
        grad_norm = math.sqrt(sum(float(t.grad.double().pow(2).sum()) for t in model.params.values() if t.grad is not None))
        rel = lambda a, b: abs(a - b) / max(1e-12, abs(b))
        result = {"bench": "eager_lm_train_check", "loss": float(loss), "memscope_loss": args.check_loss,
                  "loss_rel_error": rel(float(loss), args.check_loss), "grad_norm": grad_norm, "tol": args.tol}
        if args.check_grad_norm is not None:
            result.update(memscope_grad_norm=args.check_grad_norm, grad_norm_rel_error=rel(grad_norm, args.check_grad_norm))
        print(json.dumps(result), flush=True)
        ok = result["loss_rel_error"] <= args.tol and result.get("grad_norm_rel_error", 0) <= args.tol
    if args.time:
        train = config.get("train", {})
        params = list(model.params.values())
        optimiser = torch.optim.AdamW(params, lr=_dig(train, "lr", 3e-3), weight_decay=_dig(train, "weight_decay", 0.01))
        clip = _dig(train, "clip", 1.0)
        seconds = []
        def step():
            optimiser.zero_grad()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
                _, objective = model.loss(tokens, targets, args.chunk)
            objective.backward()
            torch.nn.utils.clip_grad_norm_(params, clip)
            optimiser.step()
            sync()

        for i in range(args.time + 2):
            sync()
            start = time.perf_counter()
            step()
            if i >= 2:
                seconds.append(time.perf_counter() - start)
        if args.profile:
            from torch.profiler import ProfilerActivity, profile
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
            with profile(activities=activities) as prof:
                step()
            prof.export_chrome_trace(args.profile)
        calls = aten_calls(step) if args.count_aten else {}
        s = statistics.median(seconds)
        print(json.dumps({**calls, "bench": "eager_lm_train", "case": args.case, "device": str(device), "batch": tokens.size(0),
                          "seq_len": tokens.size(1), "chunk": args.chunk, "dtype": "bf16-autocast" if args.bf16 else "float32", "step_ms": round(1e3 * s, 3),
                          "tokens_per_s": round(tokens.numel() / s, 1), "median_of": len(seconds),
                          "torch": torch.__version__}), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
