#!/usr/bin/python3
"""memscope against eager PyTorch on the same GPU, interleaved in one run (issue 23; bench/gpu.sh).

Rounds of: memscope's device_bench (the memory layer's sequential step and its chunkwise form)
and then eager PyTorch's (time_eager.py --device cuda, the same math), so that drift hits both
alike. Then memscope's whole-model step and training step once. Prints every raw JSON line, then
one "gpu_compare" line per pairing with both medians and the ratio (memscope / eager tokens/s),
and the share of the GPU's measured fp32 peak (gpu_peak.py, passed in with --peak).

    python3 bench/eager/gpu_compare.py --memscope build-gpu [--rounds 3] [--peak peak.jsonl]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def lines(cmd):
    """The JSON lines `cmd` prints, echoed. A command that fails says so in one JSON line, with the
    tail of its error, and gives what it printed before: one failed case loses only itself."""
    run = subprocess.run(cmd, capture_output=True, text=True)
    rows = [json.loads(l) for l in run.stdout.splitlines() if l.startswith("{")]
    for r in rows:
        print(json.dumps(r), flush=True)
    if run.returncode != 0:
        print(json.dumps({"bench": "error", "cmd": " ".join(os.path.basename(c) for c in cmd[:2]) + " " + " ".join(cmd[2:]),
                          "rc": run.returncode, "stderr": run.stderr[-1500:]}), flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--memscope", default="build-gpu", help="the build folder")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layer-tokens", type=int, default=512)
    p.add_argument("--chunk-tokens", type=int, default=8192)
    p.add_argument("--peak", help="gpu_peak.py's JSON lines")
    p.add_argument("--only", default="layer,model,train", help="which comparisons: layer, model, train, fla")
    p.add_argument("--fla-tokens", type=int, default=8192, help="fla: the shape's T (FLA's figure is for 8192)")
    p.add_argument("--fla-heads", type=int, default=96, help="fla: the shape's H (FLA's figure is for 96)")
    p.add_argument("--model-tokens", type=int, default=512)
    p.add_argument("--model-rounds", type=int, default=1)
    p.add_argument("--train-batch", type=int, default=8)
    p.add_argument("--device", default="cuda", help="cuda (the point), or cpu to try this script")
    p.add_argument("--profile", help="train: one more step of each side and dtype under the profiler, traces to "
                                     "PREFIX-*.json and their summaries (trace_summary.py) to stdout")
    args = p.parse_args()
    only = args.only.split(",")
    cli = os.path.join(args.memscope, "app", "cli", "memscope-cli")
    bench = os.path.join(args.memscope, "bench", "device_bench")
    eager = [sys.executable, os.path.join(HERE, "time_eager.py"), "--device", args.device]
    ours, theirs = [], []
    for _ in range(args.rounds if "layer" in only else 0):
        ours += lines([bench, "--device", args.device, "--only", "layer", "--tokens", str(args.layer_tokens), "--reps", "3"])
        theirs += lines(eager + ["--bench", "eager_layer", "--tokens", str(args.layer_tokens), "--reps", "3"])
        ours += lines([bench, "--device", args.device, "--only", "chunkwise", "--tokens", str(args.chunk_tokens), "--reps", "5"])
        theirs += lines(eager + ["--bench", "eager_chunkwise", "--tokens", str(args.chunk_tokens), "--reps", "5"])
    peak = None
    if args.peak and os.path.exists(args.peak):
        rows = [json.loads(l) for l in open(args.peak) if l.startswith("{")]
        peak = {r["dtype"]: r["tflops"] for r in rows}

    pairs = [("layer/titans unprobed", [r for r in ours if r["case"] == "layer/titans" and not r["record"]],
              [r for r in theirs if r["bench"] == "eager_layer" and r["rule"] == "titans"]),
             ("layer/titans probed", [r for r in ours if r["case"] == "layer/titans" and r["record"]],
              [r for r in theirs if r["bench"] == "eager_layer" and r["rule"] == "titans"]),
             ("layer/atlas unprobed", [r for r in ours if r["case"] == "layer/atlas" and not r["record"]],
              [r for r in theirs if r["bench"] == "eager_layer" and r["rule"] == "atlas"]),
             ("chunkwise/titans b=64", [r for r in ours if r["case"] == "chunkwise/titans"],
              [r for r in theirs if r["bench"] == "eager_chunkwise"])]
    for name, m, e in pairs:
        if not m or not e:
            continue
        tflops = median_tps(m) * e[0]["flops_per_token"] / 1e12  # the same math: eager's count applies to both
        extra = {"device": e[0]["device"], "memscope_tflops": round(tflops, 4)}
        if peak and "fp32" in peak:
            extra["share_of_fp32_peak"] = round(tflops / peak["fp32"], 5)
        pair_row(name, m, e, extra)

    if "fla" in only:
        compare_fla_shape(args, bench, eager, peak)
    if "model" in only:
        compare_models(args, bench, cli)
    if "train" in only:
        compare_training(args, bench, cli, peak)


# The larger model of issue 23 (bench/device_bench.cpp large_model_sets()).
LARGE = ["model.d_model=512", "model.layers=8", "model.memory_heads=8", "model.attention_heads=8",
         "model.window=64", "model.persistent=0"]


def checkpoint(cli, folder, name, preset, sets, device):
    """A checkpoint of `preset` after one training step on the GPU: the weights both sides run."""
    path = os.path.join(folder, f"eager_{name}.safetensors")
    cmd = [cli, "train", "--preset", preset, "--steps", "1", "--device", device, "--out", path, "--force"]
    for s in sets:
        cmd += ["--set", s]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        print(json.dumps({"bench": "error", "cmd": "memscope-cli train " + name, "rc": run.returncode,
                          "stderr": run.stderr[-1500:]}), flush=True)
    return path


def pair_row(case, ours, theirs, extra=None):
    tps, etps = median_tps(ours), median_tps(theirs)
    row = {"bench": "gpu_compare", "case": case, "memscope_tokens_per_s": round(tps, 1),
           "eager_tokens_per_s": round(etps, 1), "ratio": round(tps / etps, 3),
           "memscope_us_per_token": round(1e6 / tps, 2), "eager_us_per_token": round(1e6 / etps, 2), "rounds": len(ours)}
    row.update(extra or {})
    print(json.dumps(row), flush=True)


def median_tps(rows):
    return statistics.median(r["tokens_per_s"] for r in rows)


def compare_fla_shape(args, bench, eager, peak):
    """The chunkwise recurrence alone at FLA's published shape (B1 T8192 H96 D128, b = 64): memscope's
    chunk scan for Titans' rule against eager run_memory_chunkwise, rounds interleaved, and
    memscope's Gated DeltaNet beside FLA's 1.27 ms on a GB200 (device_bench prints that ratio)."""
    shape = ["--tokens", str(args.fla_tokens), "--heads", str(args.fla_heads), "--head-dim", "128", "--chunk", "64"]
    ours, theirs = [], []
    for _ in range(args.rounds):
        ours += lines([bench, "--device", args.device, "--only", "fla-shape", "--reps", "3",
                       "--fla-tokens", str(args.fla_tokens), "--fla-heads", str(args.fla_heads)])
        theirs += lines(eager + ["--bench", "eager_recurrence", "--rule", "titans", "--reps", "3"] + shape)
    m = [r for r in ours if r["rule"] == "titans"]
    e = [r for r in theirs if r["bench"] == "eager_recurrence"]
    if not m or not e:
        return
    tflops = median_tps(m) * e[0]["flops_per_token"] / 1e12
    extra = {"device": e[0]["device"], "memscope_tflops": round(tflops, 4),
             "shape": f"B1 T{args.fla_tokens} H{args.fla_heads} D128 b64"}
    if peak and "fp32" in peak:
        extra["share_of_fp32_peak"] = round(tflops / peak["fp32"], 5)
    pair_row("fla-shape/titans recurrence", m, e, extra)


def compare_models(args, bench, cli):
    """The whole model token by token, one stream as eager_lm.py steps it, batch 1: memscope's step
    with and without the CUDA graph, unprobed and probed, against eager_lm.py's (unprobed)."""
    models = [("demo-mqar", "demo-mqar", [], args.model_tokens), ("demo-mqar-titans", "demo-mqar-titans", [], args.model_tokens),
              ("large", "demo-mqar-titans", LARGE, max(args.model_tokens // 2, 128))]
    ckpts = {name: checkpoint(cli, args.memscope, name, preset, sets, args.device) for name, preset, sets, _ in models}
    ours, theirs = [], []
    for _ in range(args.model_rounds):
        ours += lines([bench, "--device", args.device, "--only", "model", "--tokens", str(args.model_tokens), "--reps", "2"])
        for name, _, _, tokens in models:
            theirs += lines([sys.executable, os.path.join(HERE, "eager_lm.py"), "--ckpt", ckpts[name], "--time",
                             str(tokens), "--reps", "2", "--device", args.device, "--case", "model/" + name])
    for name, _, _, _ in models:
        e = [r for r in theirs if r["case"] == "model/" + name]
        for graph in (False, True):
            for record in (False, True):
                m = [r for r in ours if r["case"] == "model/" + name and r["graph"] == graph and r["record"] == record]
                if m and e:
                    pair_row(f"model/{name} {'probed' if record else 'unprobed'}{' graph' if graph else ''}", m, e,
                             {"memscope_steady_us_per_token": round(statistics.median(r["steady_us_per_token"] for r in m), 2),
                              "tokens": m[0]["tokens"]})


def compare_training(args, bench, cli, peak):
    """Training the larger model at T = 2048 (batch --train-batch, chunk 64, task copy): memscope's
    Trainer against eager_lm_train.py (the same model, chunkwise memory, AdamW) on the same shapes."""
    profile = ["--profile", args.profile + "-memscope"] if args.profile else []
    ours = lines([bench, "--device", args.device, "--only", "train", "--train-steps", "5", "--train-batch", str(args.train_batch)]
                 + profile)
    traces = [r["trace"] for r in ours if "trace" in r]
    ours = [r for r in ours if r["case"] == "train/large"]
    ckpt = checkpoint(cli, args.memscope, "large_train", "demo-mqar-titans",
                      LARGE + ["train.chunk=64", f"train.batch={args.train_batch}", "task.kind=copy", "task.seq_len=2048",
                               "task.values=64", "task.copy_tokens=64"],
                      args.device)
    eager = [sys.executable, os.path.join(HERE, "eager_lm_train.py"), "--ckpt", ckpt, "--random-batch",
             f"{args.train_batch},2048", "--chunk", "64", "--time", "5", "--device", args.device, "--case", "train/large",
             "--count-aten"]
    theirs = []
    for bf16 in ([], ["--bf16"]):
        path = f"{args.profile}-eager-{'bf16-autocast' if bf16 else 'float32'}.json" if args.profile else None
        theirs += lines(eager + bf16 + (["--profile", path] if path else []))
        if path and os.path.exists(path):
            traces.append(path)
    if traces:
        lines([sys.executable, os.path.join(HERE, "trace_summary.py")] + traces)
    for dtype in ("float32", "bf16-autocast"):
        for graph in (True, False):  # the training pass as a CUDA graph (graphed_train_pass.h), and without
            m = [r for r in ours if r["dtype"] == dtype and r.get("graph", False) == graph]
            e = [r for r in theirs if r["dtype"] == dtype]
            if m and e:
                pair_row(f"train/large {dtype}{' graph' if graph else ''}", m, e,
                         {"flops_per_token": m[0]["flops_per_token"], "memscope_tflops": round(m[0]["tflops"], 3),
                          "captures": m[0].get("captures"), "graph_failure": m[0].get("graph_failure"),
                          # one step's ATen calls, counted alike (bench/aten_call_count.h, eager_lm_train.py
                          # --count-aten): the top-level ones are about the kernels launched
                          "memscope_aten_calls": m[0].get("aten_calls"), "eager_aten_calls": e[0].get("aten_calls")})
    for row in ours:
        if peak:
            print(json.dumps({"bench": "gpu_mfu", "case": row["case"], "dtype": row["dtype"], "graph": row.get("graph", False),
                              "tflops": round(row["tflops"], 2),
                              "bf16_peak_tflops": peak.get("bf16"),
                              "fp32_peak_tflops": peak.get("fp32"), "tf32_peak_tflops": peak.get("tf32"),
                              "mfu_of_fp32": round(row["tflops"] / peak["fp32"], 4)}), flush=True)


if __name__ == "__main__":
    main()
