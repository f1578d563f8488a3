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
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    for r in rows:
        print(json.dumps(r), flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--memscope", default="build-gpu", help="the build folder")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layer-tokens", type=int, default=512)
    p.add_argument("--chunk-tokens", type=int, default=8192)
    p.add_argument("--peak", help="gpu_peak.py's JSON lines")
    args = p.parse_args()
    bench = os.path.join(args.memscope, "bench", "device_bench")
    eager = [sys.executable, os.path.join(HERE, "time_eager.py"), "--device", "cuda"]
    ours, theirs = [], []
    for _ in range(args.rounds):
        ours += lines([bench, "--device", "cuda", "--only", "layer", "--tokens", str(args.layer_tokens), "--reps", "3"])
        theirs += lines(eager + ["--bench", "eager_layer", "--tokens", str(args.layer_tokens), "--reps", "3"])
        ours += lines([bench, "--device", "cuda", "--only", "chunkwise", "--tokens", str(args.chunk_tokens), "--reps", "5"])
        theirs += lines(eager + ["--bench", "eager_chunkwise", "--tokens", str(args.chunk_tokens), "--reps", "5"])
    peak = None
    if args.peak and os.path.exists(args.peak):
        rows = [json.loads(l) for l in open(args.peak) if l.startswith("{")]
        peak = {r["dtype"]: r["tflops"] for r in rows}

    def median_tps(rows):
        return statistics.median(r["tokens_per_s"] for r in rows)

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
        tps, etps = median_tps(m), median_tps(e)
        flops = e[0]["flops_per_token"]  # the same math: eager's count applies to both
        row = {"bench": "gpu_compare", "case": name, "device": e[0]["device"], "memscope_tokens_per_s": round(tps, 1),
               "eager_tokens_per_s": round(etps, 1), "ratio": round(tps / etps, 3),
               "memscope_us_per_token": round(1e6 / tps, 2), "eager_us_per_token": round(1e6 / etps, 2),
               "memscope_tflops": round(tps * flops / 1e12, 4), "rounds": len(m)}
        if peak and "fp32" in peak:
            row["share_of_fp32_peak"] = round(tps * flops / 1e12 / peak["fp32"], 5)
        print(json.dumps(row), flush=True)

    # The whole model token by token: memscope's step against eager_lm.py's, demo-mqar-titans.
    cli = os.path.join(args.memscope, "app", "cli", "memscope-cli")
    ckpt = os.path.join(args.memscope, "eager_lm.safetensors")
    subprocess.run([cli, "train", "--preset", "demo-mqar-titans", "--steps", "2", "--out", ckpt, "--force"],
                   check=True, capture_output=True)
    ours_model, eager_model = [], []
    for _ in range(args.rounds):
        ours_model += lines([bench, "--device", "cuda", "--only", "model", "--tokens", "512", "--reps", "3"])
        eager_model += lines([sys.executable, os.path.join(HERE, "eager_lm.py"), "--ckpt", ckpt, "--time", "512",
                              "--reps", "3", "--device", "cuda"])
    m = [r for r in ours_model if r["case"] == "model/demo-mqar-titans" and not r["record"]]
    if m and eager_model:
        tps, etps = median_tps(m), median_tps(eager_model)
        print(json.dumps({"bench": "gpu_compare", "case": "model/demo-mqar-titans unprobed", "memscope_tokens_per_s": round(tps, 1),
                          "eager_tokens_per_s": round(etps, 1), "ratio": round(tps / etps, 3),
                          "memscope_us_per_token": round(1e6 / tps, 2), "eager_us_per_token": round(1e6 / etps, 2),
                          "rounds": len(m)}), flush=True)
    for row in lines([bench, "--device", "cuda", "--only", "train", "--train-steps", "5"]):
        if peak:
            print(json.dumps({"bench": "gpu_mfu", "case": row["case"], "tflops": round(row["tflops"], 2),
                              "fp32_peak_tflops": peak.get("fp32"), "tf32_peak_tflops": peak.get("tf32"),
                              "mfu_of_fp32": round(row["tflops"] / peak["fp32"], 4)}), flush=True)


if __name__ == "__main__":
    main()
