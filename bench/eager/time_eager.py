#!/usr/bin/python3
"""Times the eager PyTorch forms of eager_memory.py on one CPU thread.

Four benches, the first three by default (--bench picks some):
  eager_memory  run_memory: the recurrence alone, from per-token phi_k, phi_q, v and gates (random,
                in the gates' usual ranges, SPEC §1)
  eager_layer   MemoryLayer.run: the whole layer step from the layer input x_t [D] (B = 1): the fused
                q/k/v projection, the depthwise causal conv of width 4 (titans: the titans-lmm preset
                has conv on; atlas: atlas-linear has it off), per-head split, identity phi (L2
                normalise), the three gates, the recurrence and the read. x ~ N(0,1), parameters
                random with memscope's shapes and initialisation (MemoryLayerImpl's constructor).
  eager_chunkwise  MemoryLayer.run(x, chunk=b): project() batched over all T tokens (fused q/k/v
                projection, three gate projections, norms), then the chunkwise form with chunk
                b = --chunk (default 64), SPEC §9: titans' run_memory_chunkwise (the dual form) and
                atlas' run_memory_chunkwise_muon (S_t built per token, one batched NS per chunk).
                Configured as memscope's memory_bench rows they are compared with (`memory_bench
                --only linear --c 1 --optimiser gd-momentum|muon`: preset omeganet with structure
                linear, identity phi, c = 1, l2-decay): conv OFF, unlike eager_layer's titans
                (titans-lmm has conv on); --chunkwise-conv turns it on.
  eager_recurrence  run_memory_chunkwise alone (titans only), on random_inputs: the chunkwise
                recurrence with no projection, as FLA's kernels are timed; device_bench --only
                fla-shape runs memscope's chunk scan beside it at FLA's shape (--tokens 8192 --heads 96
                --head-dim 128).
T = 2048 tokens, H = 4 heads, head dim 64 (D = H*d = 256), torch.no_grad(), float32. One JSON line
per bench and rule:

    {"bench": "eager_memory" | "eager_layer" | "eager_chunkwise", "rule": ..., "tokens": T, "tokens_per_s": ...,
     "median_of": N, "gflops": ..., ...}

tokens_per_s and gflops come from the median of N timed runs (after one untimed warm-up run).

gflops counts the matmul FLOPs of the recurrence only (2 m n k per product, elementwise gate
arithmetic not counted), per token and head, with d_v = d_phi = d, window c = 1:
    prediction   M_{t-1} phi_k        2 d^2
    gradient     (M phi_k - v) phi_k^T   2 d^2      (outer product, inner dimension c = 1)
    read         M_t phi_q            2 d^2
    muon only, NS_k (SPEC §6), k = 5 iterations of
                 A = X X^T, A A, B X  3 * 2 d^3 = 6 d^3
so titans: 6 d^2 (24,576 at d = 64) and atlas: 6 d^2 + 30 d^3 (7,888,896 at d = 64).

eager_layer adds, per token (W = H*d = D here; 2 FLOPs per multiply-add):
    q/k/v projection   x_t @ [W_q; W_k; W_v]^T          2 D (3W)   = 393,216
    gates              retain, lr, momentum: x_t @ w^T   3 * 2 D H  =   6,144
    conv (titans)      4 taps per channel, 3W channels   2 * 4 (3W) =   6,144
plus H times the recurrence above. Not counted: bias adds, sigmoids, the L2 norms of q and k,
the gate and momentum elementwise updates. So per token titans 503,808 (of which the recurrence
98,304) and atlas 31,954,944 (recurrence 31,555,584).

eager_chunkwise counts the matmul FLOPs run_memory_chunkwise executes (dense, as written: the [b,b]
products are full matmuls although lower triangular), per chunk of b tokens and head, d_v = d_phi = d:
    coefficients  Da Db  2 b^3,  Da Pb  2 b^2,  Q Phi^T  2 b^2 d           (before the loop, all chunks)
    psi           Phi M_0^T                    2 b d^2
    read          Q M_0^T, Q S_0^T            2 * 2 b d^2,  (A * Q Phi^T) Psi  2 b^2 d
    chunk end     Psi^T diag(.) Phi for M and S   2 * 2 b d^2
so per token and head 10 d^2 + 4 b d + 2 b^2 + 2 b = 65,664 at d = b = 64 (2.7x the sequential
6 d^2: the price of matmul-shaped work). Not counted: the segsum exp/cumsum, the elementwise
coefficient products, the gate arithmetic. Per token with the batched projections and gates above
(conv off): 393,216 + 6,144 + H * 65,664 = 662,016 at H = 4 (conv on: + 6,144).

For atlas (run_memory_chunkwise_muon), per token and head: psi 2 d^2, S_t built by the einsum over
the chunk 2 b d^2, NS 30 d^3, M_t by the einsum 2 b d^2, the read 2 d^2: 4 d^2 + 4 b d^2 + 30 d^3
= 8,929,280 at d = b = 64; per token with the projections and gates: 36,116,480 at H = 4.

    /usr/bin/python3 bench/eager/time_eager.py [--bench eager_layer] [--tokens 2048] [--heads 4] [--head-dim 64] [--reps 5]
    /usr/bin/python3 bench/eager/time_eager.py --bench eager_chunkwise --chunk 64 --reps 21
"""
import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before torch loads its BLAS
os.environ["OMP_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eager_memory  # noqa: E402

RULES = {"titans": "gd-momentum", "atlas": "muon"}
CONV = {"titans": True, "atlas": False}  # the titans-lmm and atlas-linear presets' memory.conv
NS_STEPS = 5


def flops_per_token_head(rule, d):
    flops = 3 * 2 * d * d  # prediction, gradient outer product, read
    if RULES[rule] == "muon":
        flops += NS_STEPS * 3 * 2 * d ** 3
    return flops


def layer_flops_per_token(rule, H, d):
    D = W = H * d
    flops = 2 * D * 3 * W + 3 * 2 * D * H + H * flops_per_token_head(rule, d)
    if CONV[rule]:
        flops += 2 * 4 * 3 * W
    return flops


def chunkwise_flops_per_token_head(d, b):
    return 10 * d * d + 4 * b * d + 2 * b * b + 2 * b


def chunkwise_muon_flops_per_token_head(d, b):
    return 4 * d * d + 4 * b * d * d + NS_STEPS * 3 * 2 * d ** 3


def chunkwise_layer_flops_per_token(H, d, b, conv, per_head=chunkwise_flops_per_token_head):
    D = W = H * d
    return 2 * D * 3 * W + 3 * 2 * D * H + H * per_head(d, b) + (2 * 4 * 3 * W if conv else 0)


def random_parameters(rule, H, d, generator, conv=None):
    """memscope's parameters for D = H*d with its initialisation (MemoryLayerImpl's constructor)."""
    D = W = H * d
    rand = lambda *shape: torch.randn(*shape, generator=generator)
    params = {name: rand(W, D) / D ** 0.5 for name in ("w_q", "w_k", "w_v")}
    if CONV[rule] if conv is None else conv:
        params["conv_weight"] = 0.1 * rand(3 * W, 4)
        params["conv_weight"][:, 3] = 1.0  # near the identity: the last tap (the token itself) 1
    for gate, bias in (("retain", 3.0), ("lr", -4.6), ("momentum", 2.2)):  # gate_bias.h
        params[f"gate_{gate}_w"] = rand(H, D) / D ** 0.5
        params[f"gate_{gate}_b"] = torch.full((H,), bias)
    params["m0"] = 0.02 * rand(H, d, d)
    return params


DEVICE = torch.device("cpu")


def sync():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def timed(run, reps):
    """Warm-up run (checked finite), then reps timed runs under no_grad: the seconds of each, with
    the device synchronised before and after (the wall time a user waits)."""
    with torch.no_grad():
        y = run()  # warm-up (allocator, BLAS)
        assert torch.isfinite(y).all(), "non-finite output"
        seconds = []
        for _ in range(reps):
            sync()
            start = time.perf_counter()
            run()
            sync()
            seconds.append(time.perf_counter() - start)
    return seconds


def report(bench, rule, T, H, d, flops_per_token, seconds, **extra):
    s = statistics.median(seconds)
    print(json.dumps({
        "bench": bench, "rule": rule, "tokens": T, "tokens_per_s": round(T / s, 1),
        "median_of": len(seconds), "gflops": round(flops_per_token * T / s / 1e9, 4),
        "heads": H, "head_dim": d, "seconds": round(s, 5), "min_s": round(min(seconds), 5),
        "max_s": round(max(seconds), 5), "flops_per_token": flops_per_token, **extra,
        "threads": torch.get_num_threads(), "dtype": "float32", "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu",
    }), flush=True)


def random_inputs(T, H, d, generator):
    rand = lambda *shape: torch.randn(*shape, generator=generator)
    unit = lambda z: z / z.norm(dim=-1, keepdim=True)
    return dict(
        m0=0.02 * rand(H, d, d),
        phi_k=unit(rand(T, H, d)), v=rand(T, H, d), phi_q=unit(rand(T, H, d)),
        # SPEC §1 gate biases: retain ~ 0.95, lr ~ 0.01 (max_lr 1), momentum ~ 0.9
        retain=torch.sigmoid(3.0 + rand(T, H)), lr=torch.sigmoid(-4.6 + rand(T, H)),
        momentum=torch.sigmoid(2.2 + rand(T, H)),
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rule", choices=sorted(RULES), action="append", help="default: both")
    p.add_argument("--bench", choices=["eager_memory", "eager_layer", "eager_chunkwise", "eager_recurrence"],
                   action="append", help="default: the first three")
    p.add_argument("--chunk", type=int, default=64, help="eager_chunkwise's and eager_recurrence's chunk size b")
    p.add_argument("--chunkwise-conv", action="store_true", help="eager_chunkwise with the conv on")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu or cuda: where the tensors live (inputs are drawn on the CPU)")
    args = p.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    on = lambda tensors: {name: t.to(DEVICE) for name, t in tensors.items()}
    torch.set_num_threads(1)
    T, H, d = args.tokens, args.heads, args.head_dim
    benches = args.bench or ["eager_memory", "eager_layer", "eager_chunkwise"]
    for rule in args.rule or ["titans", "atlas"]:
        if "eager_memory" in benches:
            inputs = on(random_inputs(T, H, d, torch.Generator().manual_seed(args.seed)))
            seconds = timed(lambda: eager_memory.run_memory(RULES[rule], ns_steps=NS_STEPS, **inputs), args.reps)
            report("eager_memory", rule, T, H, d, flops_per_token_head(rule, d) * H, seconds)
        if "eager_layer" in benches:
            generator = torch.Generator().manual_seed(args.seed)
            layer = eager_memory.MemoryLayer(on(random_parameters(rule, H, d, generator)), H, RULES[rule], ns_steps=NS_STEPS)
            x = torch.randn(T, H * d, generator=generator).to(DEVICE)
            seconds = timed(lambda: layer.run(x), args.reps)
            report("eager_layer", rule, T, H, d, layer_flops_per_token(rule, H, d), seconds, d_model=H * d,
                   conv=CONV[rule], recurrence_flops_per_token=flops_per_token_head(rule, d) * H)
        if "eager_chunkwise" in benches:
            generator = torch.Generator().manual_seed(args.seed)
            conv, b = args.chunkwise_conv, args.chunk
            layer = eager_memory.MemoryLayer(on(random_parameters(rule, H, d, generator, conv)), H, RULES[rule],
                                             ns_steps=NS_STEPS)
            x = torch.randn(T, H * d, generator=generator).to(DEVICE)
            seconds = timed(lambda: layer.run(x, chunk=b), args.reps)
            per_head = chunkwise_flops_per_token_head if RULES[rule] == "gd-momentum" else chunkwise_muon_flops_per_token_head
            report("eager_chunkwise", rule, T, H, d, chunkwise_layer_flops_per_token(H, d, b, conv, per_head), seconds,
                   chunk=b, d_model=H * d, conv=conv, recurrence_flops_per_token=per_head(d, b) * H)
        if "eager_recurrence" in benches and RULES[rule] == "gd-momentum":
            inputs = on(random_inputs(T, H, d, torch.Generator().manual_seed(args.seed)))
            seconds = timed(lambda: eager_memory.run_memory_chunkwise(chunk=args.chunk, **inputs), args.reps)
            report("eager_recurrence", rule, T, H, d, chunkwise_flops_per_token_head(d, args.chunk) * H, seconds,
                   chunk=args.chunk)


if __name__ == "__main__":
    main()
