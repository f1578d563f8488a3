#!/usr/bin/env bash
# The runs behind the README's detector tables (issue 19, "How the detector defaults were chosen"):
# healthy runs counted by detector_bench, then planted faults found by fault_bench, one JSON line
# per run, one thread each, default thresholds. About 45 CPU minutes on this project's 2-core
# machine, most of it the training runs and HOPE. QUICK=1 keeps to the inspect runs (a few minutes);
# LONG=1 adds demo-mqar's 10k-step training run (45 minutes more).
# Usage: bench/detector_tables.sh [extra --set KEY=VALUE ...] > detectors.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=${BENCH:-build/bench}
[[ -x $BENCH/detector_bench && -x $BENCH/fault_bench ]] || {
  echo "detector_tables: $BENCH/detector_bench or fault_bench is missing; run scripts/setup first" >&2
  exit 1
}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

healthy() {  # preset mode steps [sets...]
  local preset=$1 mode=$2 steps=$3
  shift 3
  "$BENCH/detector_bench" --preset "$preset" --mode "$mode" --steps "$steps" "$@"
}

# Healthy runs: events per 10,000 steps.
for preset in demo-mqar demo-mqar-titans demo-mqar-atlas-mlp demo-mqar-titans-mlp demo-mqar-swa; do
  healthy "$preset" inspect 10000 "$@"
done
healthy demo-mqar inspect 10000 --set train.seed=1 "$@"
# Planted faults in inspect mode (fault_bench's five kinds, 20 of each).
"$BENCH/fault_bench" --preset demo-mqar "$@"
"$BENCH/fault_bench" --preset demo-mqar --ckpt assets/demo-mqar-trained.safetensors "$@"
"$BENCH/fault_bench" --preset demo-mqar-titans "$@"
[[ -n ${QUICK:-} ]] && exit 0

healthy demo-mqar-hope inspect 2000 "$@"
for preset in demo-mqar demo-mqar-titans; do
  healthy "$preset" train 1500 "$@"
done
# A whole 10k-step training run, past convergence, where detect.loss_floor matters (4 minutes;
# demo-mqar's takes 45: LONG=1 adds it).
healthy demo-mqar-titans train 10000 --set train.steps=10000 "$@"
[[ -n ${LONG:-} ]] && healthy demo-mqar train 10000 --set train.steps=10000 "$@"
healthy demo-mqar train+inspect 1500 "$@"
# Planted faults in training, from the trained demo (against a model at chance, a batch of random
# data is not anomalous).
"$BENCH/fault_bench" --mode train --ckpt assets/demo-mqar-trained.safetensors --set train.steps=100000 \
  --warmup 60 --every 20 --trials 10 "$@"
