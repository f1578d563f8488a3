# Sourced by the benches that time eager PyTorch beside memscope (eager_compare.sh,
# deep_train_compare.sh), from the repository root: sets PY, Debian's python3 with its torch (the
# same LibTorch and BLAS as memscope's), and stops with one line where it is missing or a memscope
# program the bench runs is not built. Then starts the run's two result files, OUT/memscope.jsonl
# and OUT/eager.jsonl (OUT defaults to build/BENCH_NAME), and pins both sides to one thread.
#   source bench/eager_python.sh BENCH_NAME [PROGRAM...]
PY=/usr/bin/python3
"$PY" -c "import torch" 2>/dev/null || {
  echo "$1: $PY cannot import torch; install Debian's python3-torch (apt-get install python3-torch)" >&2
  exit 1
}
for program in "${@:2}"; do
  [[ -x $program ]] || { echo "$1: $program is missing; run scripts/setup first" >&2; exit 1; }
done
OUT=${OUT:-build/$1}
mkdir -p "$OUT"
: >"$OUT/memscope.jsonl"
: >"$OUT/eager.jsonl"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
