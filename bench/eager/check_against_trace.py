#!/usr/bin/python3
"""Checks eager_memory.py against memscope's own sequential step and chunkwise form (SPEC §9).

For each rule it runs `memscope-cli memory-trace --parameters`, reads the safetensors it writes and
checks two things against the trace:
  recurrence  the traced per-token inputs (phi_k, phi_q, v, retain, lr, momentum, gamma) and M_0 into
              eager_memory.run_memory; every M_t, S_t, y_t and the surprise L_t before and after the
              write are compared. Free-running from M_0: nothing but the inputs is taken from the trace.
  layer       the layer input x [T,D] and the layer's parameters (param/NAME) into
              eager_memory.MemoryLayer: projections, conv, phi, gates, recurrence and read all eager,
              nothing per token from the trace; compared: y_t, M_t, S_t, and the per-token inputs it
              computed on the way (phi_k, phi_q, v, retain, lr, momentum).

Then, for rules the eager chunkwise forms cover (run_memory_chunkwise: gd-momentum, and
run_memory_chunkwise_muon: muon; c = 1, read after write; with the default rules: titans and atlas),
the chunkwise form: `memory-trace --chunk B --parameters` over
--chunk-tokens tokens (default 200 = 3 chunks of 64 and one of 8, so the short last chunk is
covered too). memscope's trace of the chunkwise form holds M, S after every token (it runs the
materialised path: ChunkRunner::materialised, since record is on) and y; compared:
  chunkwise recurrence  run_memory_chunkwise (the dual form; muon: run_memory_chunkwise_muon) from
                        the traced inputs and M_0: y, every M_t, S_t, loss_before/after
  chunkwise reference   run_memory_chunkwise against run_memory(grad_chunk=B), the per-token loop
                        with the gradient frozen at chunk starts (§9's reference), same traced
                        inputs, both in float64: y, M, S
  chunkwise layer       MemoryLayer.run(x, chunk=B): projections batched over T, then the above
--chunk 0 skips it.

Error per tensor: max |eager - trace| (abs) and abs / max |trace| (rel, normwise, so entries near
zero do not blow it up). Exits 1 when a rel error is above --tol (default 1e-5; the layer's own
--layer-tol, default the same), 2 when a rule uses something eager_memory.py does not implement.

    /usr/bin/python3 bench/eager/check_against_trace.py            # both rules
    /usr/bin/python3 bench/eager/check_against_trace.py --rule atlas --set memory.window.c=8
    /usr/bin/python3 bench/eager/check_against_trace.py --rule titans --chunk 16 --chunk-tokens 100
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eager_memory  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The rules of the brief. There is no `titans` preset: titans-lmm is Titans' rule on the MLP
# memory, so it is switched to linear memory; atlas-linear has an Omega window of c = 8, so it is
# switched to c = 1 (the sequential form the baseline is about).
RULES = {
    "titans": ("titans-lmm", ["memory.structure=linear"]),
    "atlas": ("atlas-linear", ["memory.window.c=1"]),
}

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
          "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path):
    """safetensors v0: u64 LE header length N, N bytes of JSON header, then raw LE tensor bytes."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    body = bytearray(data[8 + n:])  # writable, so frombuffer does not warn
    tensors = {}
    for name, info in header.items():
        start, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        count = (end - start) // torch.empty(0, dtype=dtype).element_size()
        t = torch.frombuffer(body, dtype=dtype, count=count, offset=start) if count else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors, metadata


def unsupported(rule):
    m = rule["memory"]
    why = []
    if m["structure"] != "linear": why.append(f"structure {m['structure']} (only linear)")
    if m["bias"] != "l2": why.append(f"bias {m['bias']} (only l2)")
    if m["retention"] not in ("l2-decay", "none"): why.append(f"retention {m['retention']} (only l2-decay, none)")
    if m["optimiser"] not in ("gd-momentum", "muon"): why.append(f"optimiser {m['optimiser']} (only gd-momentum, muon)")
    return why


def layer_unsupported(rule):
    m = rule["memory"]
    why = []
    if m["window"]["c"] != 1: why.append(f"window c = {m['window']['c']} (only c = 1)")
    if m["window"]["gamma"] == "gated": why.append("gated gamma")
    if m["feature_map"]["kind"] != "identity": why.append(f"feature map {m['feature_map']['kind']} (only identity)")
    return why


def compare(ours, tr, tol):
    """Prints the error of each of ours against the trace's tensor of that name; returns the worst rel."""
    worst = 0.0
    for key, mine in ours.items():
        ref = tr[key].double()
        err = (mine.double() - ref).abs().max().item()
        rel = err / max(ref.abs().max().item(), 1e-30)
        worst = max(worst, rel)
        flag = "" if rel <= tol else "   FAIL"
        print(f"  {key:12s} {str(list(ref.shape)):18s} max|ref| {ref.abs().max().item():10.4g}  "
              f"max abs err {err:9.3g}  rel {rel:9.3g}{flag}")
    return worst


def trace(name, preset, sets, args, workdir, tokens, chunk=None):
    """Runs memscope-cli memory-trace; returns the tensors, the metadata and the rule (parsed)."""
    out = os.path.join(workdir, f"{name}{'' if chunk is None else f'_chunk{chunk}'}.safetensors")
    cmd = [args.cli, "memory-trace", "--preset", preset, "--tokens", str(tokens), "--heads", str(args.heads),
           "--dim", str(args.dim), "--seed", str(args.seed), "--parameters", "--out", out]
    if chunk is not None:
        cmd += ["--chunk", str(chunk)]
    for s in ["memory.feature_map.kind=identity"] + sets + args.set:
        cmd += ["--set", s]
    print("$", " ".join(cmd))
    subprocess.run(cmd, check=True, cwd=ROOT)
    tr, meta = read_safetensors(out)
    return tr, meta, json.loads(meta["rule"])


def chunkwise_unsupported(rule):
    m = rule["memory"]
    why = unsupported(rule)
    if m["optimiser"] not in ("gd-momentum", "muon"):
        why.append(f"optimiser {m['optimiser']} (only gd-momentum, muon)")
    if m["window"]["c"] != 1: why.append(f"window c = {m['window']['c']} (only c = 1)")
    if m["read"] != "after-write": why.append(f"read {m['read']} (only after-write)")
    return why


def check_chunkwise(name, preset, sets, args, workdir):
    """The chunkwise form (§9): worst rel errors of the recurrence, the float64 reference and the
    layer; all None when run_memory_chunkwise does not cover the rule."""
    tr, meta, rule = trace(name, preset, sets, args, workdir, args.chunk_tokens, args.chunk)
    assert meta.get("form") == "chunkwise" and int(meta["chunk"]) == args.chunk, meta
    why = chunkwise_unsupported(rule)
    if why:
        print(f"{name} chunkwise: not covered by eager_memory.run_memory_chunkwise: {'; '.join(why)}")
        return None, None, None
    m = rule["memory"]
    dt = torch.float64 if args.float64 else torch.float32
    d_v = tr["v"].size(-1)
    inner_scale = 1.0 / d_v if m["inner"]["normalize"] else 1.0
    keys = ("phi_k", "v", "phi_q", "retain", "lr", "momentum", "gamma")
    inputs = lambda dtype: [tr["M"][0].to(dtype)] + [tr[k].to(dtype) for k in keys]
    opts = dict(inner_scale=inner_scale, inner_clip=m["inner"]["clip"], record=True)
    ns = m["ns"]
    ns_opts = dict(ns_steps=ns["steps"], ns_coefficients=tuple(ns["coefficients"]),
                   ns_per_step=[tuple(c) for c in ns["per_step"]] or None)
    if m["optimiser"] == "gd-momentum":
        chunkwise = eager_memory.run_memory_chunkwise
    else:  # muon: the einsum-built S_t, one batched NS per chunk
        chunkwise = lambda *a, **k: eager_memory.run_memory_chunkwise_muon(*a, **k, **ns_opts)
    f = lambda key: tr[key].to(dt)
    y, M, S = chunkwise(*inputs(dt), chunk=args.chunk, **opts)
    ours = {
        "M": M, "S": S, "y": y,
        "loss_before": eager_memory.inner_loss(M[:-1], f("phi_k"), f("v"), f("gamma"), inner_scale),
        "loss_after": eager_memory.inner_loss(M[1:], f("phi_k"), f("v"), f("gamma"), inner_scale),
    }
    T = args.chunk_tokens
    print(f"{name} chunkwise: preset {preset}, chunk b = {args.chunk}, T = {T} "
          f"({T // args.chunk} full chunks{f' + one of {T % args.chunk}' if T % args.chunk else ''}), "
          f"H = {args.heads}, d = {d_v}, eager in {dt}")
    print(f"  chunkwise recurrence (the eager chunkwise form), from the traced per-token inputs:")
    worst = compare(ours, tr, args.tol)

    print(f"  chunkwise reference: the chunkwise form vs run_memory(grad_chunk={args.chunk}), both float64, same inputs:")
    ref_y, ref_M, ref_S = eager_memory.run_memory(m["optimiser"], *inputs(torch.float64), grad_chunk=args.chunk,
                                                  **(ns_opts if m["optimiser"] == "muon" else {}), **opts)
    y64, M64, S64 = chunkwise(*inputs(torch.float64), chunk=args.chunk, **opts)
    ref_worst = compare({"y": y64, "M": M64, "S": S64}, {"y": ref_y, "M": ref_M, "S": ref_S}, args.tol)

    why = layer_unsupported(rule)
    if why:
        print(f"  chunkwise layer: not supported by eager_memory.MemoryLayer: {'; '.join(why)}")
        return worst, ref_worst, None
    params = {key[len("param/"):]: f(key) for key in tr if key.startswith("param/")}
    layer = eager_memory.MemoryLayer(params, args.heads, m["optimiser"], max_lr=m["lr"]["max"],
                                     inner_scale=inner_scale, inner_clip=m["inner"]["clip"], **ns_opts)
    y, M, S, inputs = layer.run(f("x"), record=True, chunk=args.chunk)
    print(f"  chunkwise layer, from x {list(tr['x'].shape)}: projections, conv ({'on' if m['conv'] else 'off'}), "
          f"phi, gates batched over T, then the chunkwise form:")
    layer_worst = compare({"y": y, "M": M, "S": S, **inputs}, tr, args.layer_tol)
    return worst, ref_worst, layer_worst


def check(name, preset, sets, args, workdir):
    """Returns the worst rel error of the recurrence and of the layer, None for one not supported."""
    tr, meta, rule = trace(name, preset, sets, args, workdir, args.tokens)
    if meta.get("form") != "sequential":
        why = [f"form {meta.get('form')} (only the sequential step)"]
    else:
        why = unsupported(rule)
    if why:
        print(f"{name}: not supported by eager_memory.py: {'; '.join(why)}")
        return None, None
    m = rule["memory"]
    dt = torch.float64 if args.float64 else torch.float32
    f = lambda key: tr[key].to(dt)
    d_v = tr["v"].size(-1)
    inner_scale = 1.0 / d_v if m["inner"]["normalize"] else 1.0
    ns = m["ns"]
    y, M, S = eager_memory.run_memory(
        m["optimiser"], f("M")[0], f("phi_k"), f("v"), f("phi_q"), f("retain"), f("lr"), f("momentum"), f("gamma"),
        ns_steps=ns["steps"], ns_coefficients=tuple(ns["coefficients"]),
        ns_per_step=[tuple(c) for c in ns["per_step"]] or None, inner_scale=inner_scale,
        inner_clip=m["inner"]["clip"], read_after_write=m["read"] == "after-write", record=True)
    ours = {
        "M": M, "S": S, "y": y,
        "loss_before": eager_memory.inner_loss(M[:-1], f("phi_k"), f("v"), f("gamma"), inner_scale),
        "loss_after": eager_memory.inner_loss(M[1:], f("phi_k"), f("v"), f("gamma"), inner_scale),
    }
    print(f"{name}: preset {preset}, optimiser {m['optimiser']}, c = {m['window']['c']}, "
          f"T = {args.tokens}, H = {args.heads}, d = {d_v}, eager in {dt}")
    print(f"  recurrence, from the traced per-token inputs:")
    worst = compare(ours, tr, args.tol)

    why = layer_unsupported(rule)
    if why:
        print(f"  layer: not supported by eager_memory.MemoryLayer: {'; '.join(why)}")
        return worst, None
    params = {key[len("param/"):]: f(key) for key in tr if key.startswith("param/")}
    layer = eager_memory.MemoryLayer(
        params, args.heads, m["optimiser"], max_lr=m["lr"]["max"], ns_steps=ns["steps"],
        ns_coefficients=tuple(ns["coefficients"]), ns_per_step=[tuple(c) for c in ns["per_step"]] or None,
        inner_scale=inner_scale, inner_clip=m["inner"]["clip"], read_after_write=m["read"] == "after-write")
    y, M, S, inputs = layer.run(f("x"), record=True)
    print(f"  layer, from x {list(tr['x'].shape)} and {len(params)} parameters "
          f"({', '.join(sorted(params))}); conv {'on' if m['conv'] else 'off'}:")
    layer_worst = compare({"y": y, "M": M, "S": S, **inputs}, tr, args.layer_tol)
    return worst, layer_worst


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cli", default=os.path.join(ROOT, "build/app/cli/memscope-cli"))
    p.add_argument("--rule", choices=sorted(RULES), action="append", help="default: all")
    p.add_argument("--preset", help="use this preset (name or .toml) instead of the rules' own; "
                   "--set still applies")
    p.add_argument("--set", action="append", default=[], help="extra knob KEY=VALUE for memory-trace")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--layer-tol", type=float, help="tolerance of the layer check (default: --tol)")
    p.add_argument("--float64", action="store_true", help="run the eager recurrence in float64 (memscope: float32)")
    p.add_argument("--chunk", type=int, default=64, help="chunk size b of the chunkwise check (0: skip it)")
    p.add_argument("--chunk-tokens", type=int, default=200, help="T of the chunkwise check")
    args = p.parse_args()
    if args.layer_tol is None:
        args.layer_tol = args.tol
    torch.set_num_threads(1)
    if args.preset:
        runs = {os.path.splitext(os.path.basename(args.preset))[0]: (args.preset, [])}
    else:
        runs = {r: RULES[r] for r in args.rule or ["titans", "atlas"]}
    failed = unsupported_any = False
    with tempfile.TemporaryDirectory() as workdir:
        for name, (preset, sets) in runs.items():
            for part, worst, tol in zip(("recurrence", "layer"), check(name, preset, sets, args, workdir),
                                        (args.tol, args.layer_tol)):
                if worst is None:
                    unsupported_any = True
                elif worst > tol:
                    failed = True
                    print(f"{name} {part}: FAIL, max rel error {worst:.3g} > {tol:g}")
                else:
                    print(f"{name} {part}: ok, max rel error {worst:.3g} <= {tol:g}")
            if args.chunk > 0:
                # Rules the eager chunkwise forms do not cover (a window c > 1, the read before the
                # write) are skipped, not counted as unsupported.
                for part, worst, tol in zip(("chunkwise recurrence", "chunkwise reference", "chunkwise layer"),
                                            check_chunkwise(name, preset, sets, args, workdir),
                                            (args.tol, args.tol, args.layer_tol)):
                    if worst is None:
                        continue
                    if worst > tol:
                        failed = True
                        print(f"{name} {part}: FAIL, max rel error {worst:.3g} > {tol:g}")
                    else:
                        print(f"{name} {part}: ok, max rel error {worst:.3g} <= {tol:g}")
    sys.exit(1 if failed else 2 if unsupported_any else 0)


if __name__ == "__main__":
    main()
