#!/usr/bin/env bash
# The MQAR experiment of issues 4 and 8: demo-mqar (Atlas memory), demo-mqar-titans, demo-mqar-hope,
# demo-mqar-swa (no memory) and demo-mqar with TTL off, same seed and step budget, on this
# machine's CPU. ONLY=NAME runs one variant (atlas,
# atlas-mlp, titans, lmm-mlp, titans-mlp, hope, swa, ttl-off). Two runs
# at a time with one torch thread each (a 2-core machine). Prints one JSON line per variant with
# the final query accuracy, wall time and CPU time; the training logs go to $OUT (default
# build/mqar_demo/). Usage: bench/mqar_demo.sh [--steps N] [extra --set KEY=VALUE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
CLI=${CLI:-build/app/cli/memscope-cli}
[[ -x $CLI ]] || { echo "mqar_demo: $CLI is missing; run scripts/setup first" >&2; exit 1; }
OUT=${OUT:-build/mqar_demo}
mkdir -p "$OUT"
ARGS=("$@")

run() {  # name preset [sets...]
  local name=$1 preset=$2
  shift 2
  [[ -n ${ONLY:-} && $ONLY != "$name" ]] && return 0
  local log="$OUT/$name.jsonl" start end
  start=$(date +%s.%N)
  /usr/bin/time -f '%U %S' -o "$OUT/$name.time" \
    "$CLI" train --preset "$preset" --threads 1 --json "${ARGS[@]}" "$@" >"$log"
  end=$(date +%s.%N)
  python3 - "$name" "$preset" "$log" "$OUT/$name.time" "$start" "$end" <<'PY'
import json, sys
name, preset, log, timing, start, end = sys.argv[1:]
lines = [json.loads(l) for l in open(log) if l.startswith("{")]
final = [l for l in lines if l.get("eval")][-1]
steps = [l for l in lines if "step" in l and not l.get("eval")]
user, system = map(float, open(timing).read().split()[-2:])
print(json.dumps({"variant": name, "preset": preset, "steps": final["step"], "acc": round(final["acc"], 4),
                  "eval_loss": round(final["loss"], 4), "queries": final["queries"],
                  "first_loss": round(steps[0]["loss"], 4), "wall_s": round(float(end) - float(start), 1),
                  "cpu_s": round(user + system, 1)}))
PY
}

# Lane 1: the expensive Atlas runs, then the cheap no-memory one; lane 2: Titans, HOPE, then TTL off.
# The deep-memory rows (issue 18): Atlas's rule on its MLP memory, and one MLP memory layer alone.
{
  run atlas demo-mqar
  run atlas-mlp demo-mqar-atlas-mlp
  run swa demo-mqar-swa
} &
{
  run titans demo-mqar-titans
  run lmm-mlp demo-mqar-titans --set model.block=lmm --set memory.structure=mlp
  run titans-mlp demo-mqar-titans-mlp
  run hope demo-mqar-hope
  run ttl-off demo-mqar --set model.ttl=false
} &
wait
