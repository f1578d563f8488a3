#!/bin/bash
# Builds memscope against the machine's PyTorch (LibTorch 2.x with CUDA), runs the tests with the
# model on the GPU, and measures memscope against eager PyTorch on the same GPU (issue 23).
#
#   bench/gpu.sh [STAGE...]      stages: build test peak bench (default: all four, in that order)
#
# Narrower runs, for a short lease: GPU_TARGETS="memscope-cli bench_device_bench ..." builds only
# those targets; GPU_CTEST="-R graphed" replaces the test stage's selection; GPU_COMPARE="model,train"
# picks gpu_compare.py's comparisons (layer, model, train, fla) and GPU_COMPARE_ARGS adds its flags
# (e.g. "--model-tokens 256"). Each stage prints its wall time.
#
# Needs: python3 with torch (CUDA), nvcc, cmake, ninja; the header-only dependencies as Debian
# packages in .devdeps/ (README "On a GPU machine" says how to fetch them). Logs and JSON lines go
# to $OUT when set (the device tool's result folder), else to build-gpu/out/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build-gpu/out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build test peak bench)

devroot() {
  # Header-only packages unpacked beside the system, never into / (GPU.md step 2).
  if [ ! -d /tmp/devroot/usr ]; then
    mkdir -p /tmp/devroot
    for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/devroot; done
  fi
}

stage_build() {
  devroot
  local tp
  tp="$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)')"
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMSCOPE_GUI=OFF \
    -DCMAKE_PREFIX_PATH="$tp;/tmp/devroot/usr" >"$OUT/configure.log" 2>&1 || {
    tail -40 "$OUT/configure.log"; return 1; }
  grep "memscope:" "$OUT/configure.log"
  # -k 0: one build shows every error, not only the first file's.
  # shellcheck disable=SC2086
  cmake --build build-gpu -j"$JOBS" ${GPU_TARGETS:+--target $GPU_TARGETS} -- -k 0 >"$OUT/build.log" 2>&1
  local rc=$?
  grep -E "error|FAILED" "$OUT/build.log" | head -60
  echo "build exit $rc"
  return $rc
}

stage_test() {
  ./build-gpu/app/cli/memscope-cli info --device cuda
  # The model, engine, session and CLI tests with every model on the GPU (tests/support/test_device.h).
  # On the H200, -j12 runs them in about three minutes (the GPU is shared; the CPU is the limit).
  # shellcheck disable=SC2086
  MEMSCOPE_TEST_DEVICE=cuda ctest --test-dir build-gpu ${GPU_CTEST:--L 'model|engine|session|cli'} -j12 \
    --timeout 300 --output-on-failure >"$OUT/ctest-cuda.log" 2>&1
  local rc=$?
  grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest-cuda.log" | head -60
  echo "ctest (cuda) exit $rc"
  return $rc
}

stage_peak() {
  # The GPU's measured matrix-multiply rates: the ceilings every share below is taken of.
  $PY bench/eager/gpu_peak.py | tee "$OUT/peak.jsonl"
}

stage_bench() {
  [ -f "$OUT/peak.jsonl" ] || stage_peak
  PYTHONUNBUFFERED=1 $PY bench/eager/gpu_compare.py --memscope build-gpu --peak "$OUT/peak.jsonl" \
    --only "${GPU_COMPARE:-layer,model,train,fla}" ${GPU_COMPARE_ARGS:-} \
    >"$OUT/bench.jsonl" 2>"$OUT/bench.err"
  local rc=$?
  grep -E '"gpu_compare"|"gpu_mfu"|"trace_summary"|"error"' "$OUT/bench.jsonl"
  tail -5 "$OUT/bench.err"
  return $rc
}

rc=0
for s in "${stages[@]}"; do
  echo "== $s ($(date +%T))"
  from=$(date +%s)
  "stage_$s" || rc=1
  echo "== $s took $(( $(date +%s) - from )) s"
done
exit $rc
