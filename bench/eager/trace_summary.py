#!/usr/bin/env python3
"""Where one profiled step's time goes, from Chrome traces written by PyTorch's Kineto profiler:
memscope's (bench/device_bench --profile) and eager PyTorch's (eager_lm_train.py --profile) alike.

    python3 bench/eager/trace_summary.py TRACE.json [TRACE.json ...] [--top 12]

One JSON line per trace: the step's wall span, the GPU's busy time (kernels and copies, overlaps
merged) and its share of the span, the kernel and launch counts, the host-side CUDA calls that
wait (synchronise, blocking copies), and the top kernels and CPU ops. A GPU busy share far below 1
with many launches says the step is bound by the host issuing kernels, not by the GPU."""
import argparse
import collections
import json


def busy(intervals):
    """Total length of the union of [start, end) intervals."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def summarise(path, top):
    data = json.load(open(path))
    # Kineto writes {"traceEvents": [...]}; LibTorch 1.13's legacy profiler a bare list.
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    events = [e for e in events if e.get("ph") == "X" and "dur" in e]
    if not events:
        return {"bench": "trace_summary", "trace": path, "error": "no complete events"}
    span = max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)
    by_cat = collections.defaultdict(list)
    for e in events:
        by_cat[e.get("cat", "")].append(e)
    device = by_cat["kernel"] + by_cat["gpu_memcpy"] + by_cat["gpu_memset"]
    gpu_busy = busy((e["ts"], e["ts"] + e["dur"]) for e in device)
    runtime = by_cat["cuda_runtime"] + by_cat["cuda_driver"]
    launches = [e for e in runtime if "Launch" in e["name"]]
    waits = [e for e in runtime if "Synchronize" in e["name"] or e["name"] in ("cudaMemcpy", "cudaMemcpyAsync")]

    def table(rows, key):
        agg = collections.defaultdict(lambda: [0, 0.0])
        for e in rows:
            agg[key(e)][0] += 1
            agg[key(e)][1] += e["dur"]
        best = sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]
        return [{"name": k[:90], "count": c, "ms": round(t / 1e3, 3)} for k, (c, t) in best]

    return {"bench": "trace_summary", "trace": path, "span_ms": round(span / 1e3, 2), "gpu_busy_ms": round(gpu_busy / 1e3, 2),
            "gpu_busy_share": round(gpu_busy / span, 3) if span else None, "kernels": len(by_cat["kernel"]),
            "kernel_ms": round(sum(e["dur"] for e in by_cat["kernel"]) / 1e3, 2), "launches": len(launches),
            "launch_ms": round(sum(e["dur"] for e in launches) / 1e3, 2), "copies": len(by_cat["gpu_memcpy"]),
            "memsets": len(by_cat["gpu_memset"]), "host_waits": len(waits),
            "host_wait_ms": round(sum(e["dur"] for e in waits) / 1e3, 2), "cpu_ops": len(by_cat["cpu_op"]),
            "top_kernels": table(by_cat["kernel"], lambda e: e["name"]),
            "top_cpu_ops_by_count": [{"name": k[:90], "count": c} for k, c in
                                     collections.Counter(e["name"] for e in by_cat["cpu_op"]).most_common(top)]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    for path in args.traces:
        try:
            print(json.dumps(summarise(path, args.top)), flush=True)
        except (OSError, ValueError) as e:
            print(json.dumps({"bench": "trace_summary", "trace": path, "error": str(e)}), flush=True)


if __name__ == "__main__":
    main()
