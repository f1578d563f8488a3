#!/usr/bin/python3
"""What a degraded Newton–Schulz changes at a sequence's first tokens, and what the probes can see.

Issue 19's fault bench plants `memory.ns.steps=1` (the default is 5) and finds it at every token
from the fifth on, but never at tokens 0–3. This answers why, with the momentum S of a 16×16
memory built as it is at a sequence start (S restarts at 0, then S_t = 0.9·S_(t−1) + a rank-1
gradient, so S has rank t + 1 at token t), in float64, for many random sequences:

- how much the write U = NS_k(S) changes: ‖U_1 − U_5‖_F / ‖U_5‖_F;
- the NS orthogonality error of SPEC §8, e = ‖UᵀU − I‖_F / √r, healthy (k = 5) and degraded (k = 1);
- U's largest singular value, and its smallest among the t + 1 that are not zero.

One JSON line per token. Flags: --tokens N (16), --trials N (500), --side D (16).
Needs only Debian's python3-torch; it does not touch memscope.
"""
import argparse
import json

import torch

A, B, C = 3.4445, -4.7750, 2.0315  # SPEC §6's default quintic


def newton_schulz(g, steps):
    x = g / (g.norm() + 1e-7)
    for _ in range(steps):
        a = x @ x.T
        x = A * x + (B * a + C * a @ a) @ x
    return x


def ns_error(u):
    r = u.shape[0]
    return ((u.T @ u - torch.eye(r, dtype=u.dtype)).norm() / r ** 0.5).item()


def momentum_at(token, side, seed):
    gen = torch.Generator().manual_seed(seed)
    s = torch.zeros(side, side, dtype=torch.float64)
    for _ in range(token + 1):
        s = 0.9 * s + torch.randn(side, 1, generator=gen, dtype=torch.float64) @ torch.randn(
            1, side, generator=gen, dtype=torch.float64)
    return s


def spread(values):
    t = torch.tensor(values)
    return {"median": round(t.median().item(), 4), "min": round(t.min().item(), 4), "max": round(t.max().item(), 4)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--side", type=int, default=16)
    args = parser.parse_args()
    for token in range(args.tokens):
        change, e_healthy, e_degraded = [], [], []
        top_healthy, top_degraded, low_healthy, low_degraded = [], [], [], []
        for trial in range(args.trials):
            s = momentum_at(token, args.side, 1000 * trial + 7)
            healthy, degraded = newton_schulz(s, 5), newton_schulz(s, 1)
            change.append(((degraded - healthy).norm() / healthy.norm()).item())
            e_healthy.append(ns_error(healthy))
            e_degraded.append(ns_error(degraded))
            rank = min(token + 1, args.side)
            sh, sd = torch.linalg.svdvals(healthy)[:rank], torch.linalg.svdvals(degraded)[:rank]
            top_healthy.append(sh[0].item())
            top_degraded.append(sd[0].item())
            low_healthy.append(sh[-1].item())
            low_degraded.append(sd[-1].item())
        print(json.dumps({"bench": "ns_early_tokens", "token": token, "trials": args.trials,
                          "write_change": spread(change),
                          "ns_error": {"healthy": spread(e_healthy), "degraded": spread(e_degraded)},
                          "sigma_max": {"healthy": spread(top_healthy), "degraded": spread(top_degraded)},
                          "sigma_min_nonzero": {"healthy": spread(low_healthy), "degraded": spread(low_degraded)}}))


if __name__ == "__main__":
    main()
