#!/usr/bin/env bash
# memscope's sequential memory-layer step against the eager-PyTorch loop a researcher would write
# (bench/eager/), in one run: REPS rounds (default 5), each timing memscope (bench/step_bench)
# and then eager Python, one thread each, so that machine noise hits both alike. Prints one JSON
# line per rule: both medians, the ratio, GFLOP/s and the share of this core's sgemm peak
# (measured by step_bench in the same run).
# Needs Debian's python3-torch, for this benchmark only: apt-get install python3-torch.
# Usage: bench/eager_compare.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
"$PY" -c "import torch" 2>/dev/null || {
  echo "eager_compare: $PY cannot import torch; install Debian's python3-torch (apt-get install python3-torch)" >&2
  exit 1
}
STEP=${STEP:-build/bench/step_bench}
[[ -x $STEP ]] || { echo "eager_compare: $STEP is missing; run scripts/setup first" >&2; exit 1; }
REPS=${1:-5}
OUT=${OUT:-build/eager_compare}
mkdir -p "$OUT"
: >"$OUT/memscope.jsonl"
: >"$OUT/eager.jsonl"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
for _ in $(seq 1 "$REPS"); do
  "$STEP" --only layer --reps 1 >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/time_eager.py --bench eager_layer --reps 1 >>"$OUT/eager.jsonl"
done

"$PY" - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
ours = [json.loads(l) for l in open(f"{out}/memscope.jsonl") if l.startswith("{")]
eager = [json.loads(l) for l in open(f"{out}/eager.jsonl") if l.startswith("{")]
for rule in ("titans", "atlas"):
    e = [r for r in eager if r["rule"] == rule]
    e_tps = statistics.median(r["tokens_per_s"] for r in e)
    for record in (False, True):
        m = [r for r in ours if r["case"] == f"layer/{rule}" and r["record"] == record]
        tps = statistics.median(r["tokens_per_s"] for r in m)
        gflops = statistics.median(r["gflops"] for r in m)
        peak = statistics.median(r["sgemm_peak_gflops"] for r in m)
        print(json.dumps({"bench": "eager_compare", "rule": rule, "step": "probed" if record else "unprobed",
                          "memscope_tokens_per_s": round(tps, 1), "eager_tokens_per_s": round(e_tps, 1),
                          "ratio": round(tps / e_tps, 3), "memscope_gflops": round(gflops, 2),
                          "sgemm_peak_gflops": round(peak, 1), "share_of_peak": round(gflops / peak, 3),
                          "rounds": len(m)}))
PY
