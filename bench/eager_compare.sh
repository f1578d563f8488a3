#!/usr/bin/env bash
# memscope's sequential step against the eager-PyTorch loop a researcher would write (bench/eager/),
# in one run: REPS rounds (default 5), each timing memscope (bench/step_bench) and then eager
# Python, one thread each, so that machine noise hits both alike. Two pairings:
#   layer  the memory layer (Titans' and Atlas' rules): one JSON line per rule with both medians,
#          the ratio, GFLOP/s and the share of this core's sgemm peak (step_bench measures it)
#   model  the whole demo-mqar-titans model token by token (eager_lm.py, checked first against
#          memscope's recorded step of the same checkpoint): both medians and the ratio
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
CLI=${CLI:-build/app/cli/memscope-cli}
# The model pairing's weights, and memscope's own step of them for eager_lm.py to be checked against.
rm -rf "$OUT/model.memscope"
"$CLI" train --preset demo-mqar-titans --steps 2 --out "$OUT/model.safetensors" --force >/dev/null
"$CLI" step --ckpt "$OUT/model.safetensors" --tokens 200 --probe-every 1 --record "$OUT/model.memscope" >/dev/null
"$CLI" export "$OUT/model.memscope" --csv "$OUT/model.csv" --force >/dev/null
"$PY" bench/eager/eager_lm.py --ckpt "$OUT/model.safetensors" --check "$OUT/model.csv" >>"$OUT/eager.jsonl"
for _ in $(seq 1 "$REPS"); do
  "$STEP" --only layer --reps 1 >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/time_eager.py --bench eager_layer --reps 1 >>"$OUT/eager.jsonl"
  "$STEP" --only model --model-preset demo-mqar-titans --tokens 512 --reps 1 >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/eager_lm.py --ckpt "$OUT/model.safetensors" --time 512 --reps 1 >>"$OUT/eager.jsonl"
done

"$PY" - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
ours = [json.loads(l) for l in open(f"{out}/memscope.jsonl") if l.startswith("{")]
eager = [json.loads(l) for l in open(f"{out}/eager.jsonl") if l.startswith("{")]
for rule in ("titans", "atlas"):
    e = [r for r in eager if r.get("rule") == rule]
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
e = [r for r in eager if r["bench"] == "eager_lm"]
e_tps = statistics.median(r["tokens_per_s"] for r in e)
for record in (False, True):
    m = [r for r in ours if r["case"] == "model/demo-mqar-titans" and r["record"] == record]
    tps = statistics.median(r["tokens_per_s"] for r in m)
    print(json.dumps({"bench": "eager_compare", "model": "demo-mqar-titans", "step": "probed" if record else "unprobed",
                      "memscope_tokens_per_s": round(tps, 1), "eager_tokens_per_s": round(e_tps, 1),
                      "ratio": round(tps / e_tps, 3), "rounds": len(m)}))
check = [r for r in eager if r["bench"] == "eager_lm_check"]
print(json.dumps(check[0] if check else {"bench": "eager_lm_check", "missing": True}))
PY
