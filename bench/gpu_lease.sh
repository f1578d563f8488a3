#!/bin/bash
# One short GPU lease, the checks still open on issue 23, in the order they matter, each under its
# own time limit, so that a lease that ends early still brings back what ran. For the device tool:
#
#   run: bench/gpu_lease.sh    carry: .devdeps .gl .guideps    timeout_s: 560
#
# The carried folders are ignored by git, so a fresh checkout has none: bench/gpu_gui_fetch.sh
# fetches all three first, here (seconds, no device time).
#
# All stages take more than one call's 600 s. The 15 device minutes count the machine's start (a
# minute or two) and its idle time too, so two calls back to back, the second at once (the machine
# keeps build-gpu only while it stays warm, 30 s):
#   run: LEASE_STAGES="build tests model" bench/gpu_lease.sh    timeout_s: 360
#   run: LEASE_STAGES="train fla gui" bench/gpu_lease.sh        timeout_s: what status leaves, less 30
# Each stage's own limit keeps the rest going; a call cut short still brings back $OUT, and the
# gui stage, last, is the one a short second call loses.
#
# Stages (LEASE_STAGES picks some, default all, in this order):
#   build   headless build-gpu: the CLI, the model and engine tests, device_bench (~170 s on 16 cores)
#   tests   the CUDA cases changed since their last GPU run: the CPU-pinned fused and allocator cases,
#           the chunk scan's, the trainer's and AdamW's, both graphs', bf16's, and the host-read
#           watch's real captures: the inspect step's and nine models' training passes, with c10's
#           sync warnings; the graphs' own capture streams (~50 s)
#   model   memscope's per-token step against eager PyTorch, with and without the graph, which
#           now takes a sequence's first window−1 tokens too (padded caches): 256 tokens (~90 s)
#   train   memscope against eager PyTorch, training d512×8 at T = 2048, memscope's pass as a CUDA
#           graph (graphed_train_pass.h) and without, with one profiled step of each and their trace
#           summaries; then memscope with the chunk scan off and no graph, for its A/B (~200 s)
#   fla     the chunkwise recurrence alone at FLA's published shape (B1 T8192 H96 D128): memscope's
#           Titans against eager PyTorch's, and its Gated DeltaNet beside FLA's 1.27 ms (~50 s)
#   gui     bench/gpu_gui.sh: the app under Xvfb, its screenshot and which way drew it (~60 s)
#
# At most 8 files come back from $OUT: lease.log (everything said), bench.jsonl (every JSON line),
# build_tail.log, ctest.log, gui.log, glxinfo.txt, gui_cuda.png and logs.tgz (the rest, no traces).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
FINAL=${OUT:-build-gpu/lease}
mkdir -p "$FINAL"
FINAL=$(cd "$FINAL" && pwd)
R=/tmp/lease
mkdir -p "$R"
LOG=$FINAL/lease.log
T0=$(date +%s)
say() { echo "$*" | tee -a "$LOG"; }
stage_time() { say "== $1 done at $(( $(date +%s) - T0 )) s"; }
# Everything that bench/gpu.sh and gpu_gui.sh write goes to $R; only the summaries go to $FINAL.
export OUT=$R JOBS=${JOBS:-$(nproc)}
stages=${LEASE_STAGES:-build tests model train fla gui}
say "== gpu_lease $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# The JSON lines in one line each: the ratios, the traces' kernel counts, the A/B's ATen calls.
summarise() {
  python3 - "$FINAL/bench.jsonl" <<'PY' | tee -a "$LOG"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("bench") == "gpu_compare":
        print(r["case"], "ratio", r["ratio"], "memscope", r["memscope_tokens_per_s"], "eager", r["eager_tokens_per_s"],
              "steady_us", r.get("memscope_steady_us_per_token", ""))
    elif r.get("bench") == "trace_summary":
        print(r["trace"].split("/")[-1], "span_ms", r.get("span_ms"), "gpu_busy", r.get("gpu_busy_share"),
              "kernels", r.get("kernels"))
    elif r.get("case") == "train/large":
        side = "memscope" if r.get("bench") == "device" else r.get("bench")
        print(side, "train/large", r["dtype"], r.get("memory_form", ""), "tokens/s", round(r["tokens_per_s"]),
              "aten_calls", r.get("aten_calls"))
    elif r.get("case") == "fla-shape":
        print("fla-shape", r["rule"], "recurrence_ms", round(r["recurrence_ms"], 3), "layer_ms", round(r["layer_ms"], 3),
              "tflops", round(r["recurrence_tflops"], 3), "fla_over_memscope", r.get("fla_over_memscope"))
    elif r.get("bench") == "error":
        print("error", r.get("cmd"), r.get("stderr", "")[-300:])
PY
}

for stage in $stages; do
  case $stage in
    build)
      GPU_TARGETS="memscope-cli memscope_tests_model memscope_tests_engine bench_device_bench" \
        timeout 300 bench/gpu.sh build 2>&1 | tail -5 | tee -a "$LOG"
      tail -c 20000 "$R/build.log" >"$FINAL/build_tail.log" 2>/dev/null
      ;;
    tests)
      MEMSCOPE_TEST_DEVICE=cuda timeout 150 ctest --test-dir build-gpu -j8 --timeout 120 --output-on-failure \
        -R 'fused chunkwise|fused MLP chunkwise|decayed contractions|small-block cache|linear chunk scan|AdamW|training|graphed|cuda_graph|cuda graph|bf16|host reads|running products' \
        >"$FINAL/ctest.log" 2>&1
      grep -E "tests passed|\*\*\*Failed|Timeout" "$FINAL/ctest.log" | tee -a "$LOG"
      ;;
    model)
      PYTHONUNBUFFERED=1 timeout 150 python3 bench/eager/gpu_compare.py --memscope build-gpu --only model \
        --model-tokens 256 >>"$FINAL/bench.jsonl" 2>"$R/model.err"
      ;;
    train)
      PYTHONUNBUFFERED=1 timeout 300 python3 bench/eager/gpu_compare.py --memscope build-gpu --only train \
        --profile "$R/prof" >>"$FINAL/bench.jsonl" 2>"$R/train.err"
      timeout 90 build-gpu/bench/device_bench --device cuda --only train --train-steps 3 --chunk-scan 0 \
        --dtype float32 --graph off 2>&1 |
        grep '^{' >>"$FINAL/bench.jsonl"
      ;;
    fla)
      PYTHONUNBUFFERED=1 timeout 120 python3 bench/eager/gpu_compare.py --memscope build-gpu --only fla \
        --rounds 2 >>"$FINAL/bench.jsonl" 2>"$R/fla.err"
      ;;
    gui)
      timeout 240 bash bench/gpu_gui.sh >"$R/gui_run.log" 2>&1
      say "gpu_gui exit $? (0: the GPU drew it, 3: only the CPU did)"
      for f in gui.log glxinfo.txt gui_cuda.png; do cp "$R/$f" "$FINAL/" 2>/dev/null; done
      ;;
    *) say "unknown stage $stage" ;;
  esac
  stage_time "$stage"
done
[ -s "$FINAL/bench.jsonl" ] && summarise
tar czf "$FINAL/logs.tgz" --exclude='*.json' -C /tmp lease gui-logs 2>/dev/null
say "== gpu_lease done at $(( $(date +%s) - T0 )) s"
