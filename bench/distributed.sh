#!/usr/bin/env bash
# Data-parallel training throughput (issue 21), one run, interleaved: demo-mqar trained on
#   one process with 1 thread, one process with 2 threads, and 2 Gloo ranks of 1 thread each
#   (train --nproc 2);
# repeated REPS times (default 3) in turn so that machine noise hits every configuration alike.
# Prints one JSON line per configuration: the median tokens/s over the steps after warmup, its
# ratio to the 1-thread process, and for the ranks the median share of step time spent inside
# collectives (gradient all-reduce, loss sum, stop flag; waiting for the slower rank included).
# Usage: bench/distributed.sh [--steps N] [extra --set KEY=VALUE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
CLI=${CLI:-build/app/cli/memscope-cli}
[[ -x $CLI ]] || { echo "distributed: $CLI is missing; run scripts/setup first" >&2; exit 1; }
OUT=${OUT:-build/distributed_bench}
REPS=${REPS:-3}
mkdir -p "$OUT"
ARGS=(--steps 60 --set train.log_every=1 "$@")

for rep in $(seq 1 "$REPS"); do
  OMP_NUM_THREADS=1 "$CLI" train --json --threads 1 "${ARGS[@]}" >"$OUT/one-thread-$rep.jsonl"
  "$CLI" train --json --threads 2 "${ARGS[@]}" >"$OUT/two-threads-$rep.jsonl"
  OMP_NUM_THREADS=1 "$CLI" train --json --nproc 2 "${ARGS[@]}" >"$OUT/two-ranks-$rep.jsonl"
done

python3 - "$OUT" "$REPS" "$(nproc)" <<'PY'
import json, statistics, sys
out, reps, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def steps(name):
    rows = []
    for rep in range(1, reps + 1):
        lines = [json.loads(l) for l in open(f"{out}/{name}-{rep}.jsonl") if l.startswith("{")]
        rows += [l for l in lines if "grad_norm" in l and l["step"] > 5]  # after the first steps' warmup
    return rows
base = statistics.median(s["tokens_per_s"] for s in steps("one-thread"))
for name, procs, threads in (("one-thread", 1, 1), ("two-threads", 1, 2), ("two-ranks", 2, 1)):
    rows = steps(name)
    tps = statistics.median(s["tokens_per_s"] for s in rows)
    line = {"bench": "distributed", "config": name, "ranks": procs, "threads_per_rank": threads, "cores": cores,
            "tokens_per_s": round(tps, 1), "vs_one_thread": round(tps / base, 3), "steps": len(rows)}
    if procs > 1:
        line["comm_share_median"] = round(statistics.median(s["comm_share"] for s in rows), 4)
        line["comm_share_p90"] = round(sorted(s["comm_share"] for s in rows)[int(0.9 * (len(rows) - 1))], 4)
    print(json.dumps(line))
PY
