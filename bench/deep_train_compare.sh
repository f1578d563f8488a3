#!/usr/bin/env bash
# The deep (MLP) memory's training step against the eager-PyTorch one a researcher would write, in one
# run: demo-mqar-titans-mlp (Titans' rule on the 2-layer MLP memory, LMM blocks) trained through its
# inner gradient, memscope's Trainer (device_bench --only train-demo-mlp) against
# bench/eager/eager_lm_train.py (eager_mlp_memory.mlp_chunkwise with create_graph, autograd, AdamW);
# then the same for Atlas's rule on that memory and for HOPE (eager_hope.py), whose memories are all
# MLP memories trained through their inner gradients too.
#
# First the check: the same weights (a checkpoint at step 2) and batch (step 3's, recorded by
# `step --train-step 3`) give eager the loss and gradient norm `train --json` reports for step 3.
# Then REPS rounds (default 5), one thread each, each timing in turn memscope, memscope with
# MEMSCOPE_BATCHED_MATMUL=0 (its stacks of small products through at::matmul; state_update.h's loop
# and the one split of a sequence into chunks stay) and eager, at two sizes:
#   demo   the preset: d_model 64, 4 memory heads of 16 (hidden 64), batch 16 × 28 tokens, chunk 4
#   d256   d_model 256, 4 memory heads of 64 (hidden 256), the copy task, batch 8 × 256, chunk 16
#   atlas  demo-mqar-atlas-mlp as its preset has it: Atlas's rule (Muon, an Omega window of 4,
#          polynomial features) on the MLP memory, MAG blocks, batch 16, chunk 4, against
#          eager_mlp_memory.mlp_chunkwise_muon (every S_t built and orthogonalised in one batched
#          Newton–Schulz per chunk), checked first the same way
#   hope   demo-mqar-hope as its preset has it: HOPE blocks (the self-modifying memory, five MLP
#          memories written by dgd, then the CMS with periods 1, 4, 16 in the FFN's place, and the
#          auxiliary retrieval loss), batch 16, chunk 4, against eager_hope.selfmod_chunkwise (the
#          chunk's reads batched, inner-gradient factors by autograd.grad with create_graph, the dgd
#          decays by cumprod, the main memory's reads in the dual form) and eager_hope.cms, checked
#          first the same way; 5 timed steps a round (a step is about a second on each side)
# and prints one summary line per size: the medians and the ratios (GFLOP/s where the step's FLOPs
# are counted: Titans' dual form, not Atlas's or HOPE's).
# Needs Debian's python3-torch, for this benchmark only: apt-get install python3-torch.
# Usage: bench/deep_train_compare.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
CLI=${CLI:-build/app/cli/memscope-cli}
DEVICE_BENCH=${DEVICE_BENCH:-build/bench/device_bench}
source bench/eager_python.sh deep_train_compare "$CLI" "$DEVICE_BENCH"
REPS=${1:-5}
PRESET=demo-mqar-titans-mlp
D256=(model.d_model=256 model.memory_heads=4 task.kind=copy task.seq_len=256 task.values=64
  task.copy_tokens=16 train.batch=8 train.chunk=16)
cli_sets=() bench_sets=()
for s in "${D256[@]}"; do
  cli_sets+=(--set "$s")
  bench_sets+=(--train-set "$s")
done

# One pairing's check: the preset trained 2 steps (NAME.safetensors), step 3's batch recorded and
# exported (NAME3.csv), and eager's loss and gradient norm on them against `train --json`'s step 3.
checked_pair() {
  local name=$1 preset=$2 step3
  "$CLI" train --preset "$preset" --steps 2 --out "$OUT/$name.safetensors" --force >/dev/null
  rm -rf "$OUT/${name}3.memscope"
  "$CLI" step --ckpt "$OUT/$name.safetensors" --set train.steps=3 --train-step 3 --record "$OUT/${name}3.memscope" >/dev/null
  "$CLI" export "$OUT/${name}3.memscope" --csv "$OUT/${name}3.csv" --force >/dev/null
  step3=$("$CLI" train --preset "$preset" --steps 3 --json | grep '"step":3,' | grep -v eval)
  field() { echo "$step3" | "$PY" -c "import json,sys;print(json.load(sys.stdin)['$1'])"; }
  "$PY" bench/eager/eager_lm_train.py --ckpt "$OUT/$name.safetensors" --batch-csv "$OUT/${name}3.csv" --chunk 4 \
    --check-loss "$(field loss)" --check-grad-norm "$(field grad_norm)" >>"$OUT/eager.jsonl"
  tail -1 "$OUT/eager.jsonl"
}
"$CLI" train --preset $PRESET "${cli_sets[@]}" --steps 1 --out "$OUT/d256.safetensors" --force >/dev/null
checked_pair demo $PRESET
# Atlas's MLP memory: its own weights and batch, checked the same way.
ATLAS=demo-mqar-atlas-mlp
checked_pair atlas $ATLAS
# HOPE: its own weights and batch, checked the same way.
HOPE=demo-mqar-hope
checked_pair hope $HOPE

tag() { sed "s/^{/{\"size\":\"$1\",\"variant\":\"$2\",/"; }
for _ in $(seq 1 "$REPS"); do
  "$DEVICE_BENCH" --device cpu --only train-demo-mlp --train-steps 10 | tag demo loop >>"$OUT/memscope.jsonl"
  MEMSCOPE_BATCHED_MATMUL=0 "$DEVICE_BENCH" --device cpu --only train-demo-mlp --train-steps 10 |
    tag demo aten >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/eager_lm_train.py --ckpt "$OUT/demo.safetensors" --batch-csv "$OUT/demo3.csv" --chunk 4 \
    --time 10 --case train/$PRESET | tag demo eager >>"$OUT/eager.jsonl"
  "$DEVICE_BENCH" --device cpu --only train-demo-mlp --train-steps 3 "${bench_sets[@]}" |
    tag d256 loop >>"$OUT/memscope.jsonl"
  MEMSCOPE_BATCHED_MATMUL=0 "$DEVICE_BENCH" --device cpu --only train-demo-mlp --train-steps 3 "${bench_sets[@]}" |
    tag d256 aten >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/eager_lm_train.py --ckpt "$OUT/d256.safetensors" --random-batch 8,256 --chunk 16 --time 3 \
    --case train/$PRESET |
    tag d256 eager >>"$OUT/eager.jsonl"
  "$DEVICE_BENCH" --device cpu --only train-preset --train-preset $ATLAS --train-steps 10 | tag atlas loop >>"$OUT/memscope.jsonl"
  MEMSCOPE_BATCHED_MATMUL=0 "$DEVICE_BENCH" --device cpu --only train-preset --train-preset $ATLAS --train-steps 10 |
    tag atlas aten >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/eager_lm_train.py --ckpt "$OUT/atlas.safetensors" --batch-csv "$OUT/atlas3.csv" --chunk 4 \
    --time 10 --case train/$ATLAS | tag atlas eager >>"$OUT/eager.jsonl"
  "$DEVICE_BENCH" --device cpu --only train-preset --train-preset $HOPE --train-steps 5 | tag hope loop >>"$OUT/memscope.jsonl"
  MEMSCOPE_BATCHED_MATMUL=0 "$DEVICE_BENCH" --device cpu --only train-preset --train-preset $HOPE --train-steps 5 |
    tag hope aten >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/eager_lm_train.py --ckpt "$OUT/hope.safetensors" --batch-csv "$OUT/hope3.csv" --chunk 4 \
    --time 5 --case train/$HOPE | tag hope eager >>"$OUT/eager.jsonl"
done

"$PY" - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = [json.loads(l) for f in ("memscope", "eager") for l in open(f"{out}/{f}.jsonl") if l.startswith('{"size"')]
for size in ("demo", "d256", "atlas", "hope"):
    median = lambda variant: statistics.median(r["tokens_per_s"] for r in rows
                                               if r["size"] == size and r["variant"] == variant)
    loop, aten, eager = median("loop"), median("aten"), median("eager")
    ours = [r for r in rows if r["size"] == size and r["variant"] != "eager"]
    calls = {r["variant"]: r["aten_calls_nested"] for r in ours}
    line = {"bench": "deep_train_compare", "size": size, "memscope_tokens_per_s": round(loop, 1),
            "memscope_aten_matmul_tokens_per_s": round(aten, 1), "eager_tokens_per_s": round(eager, 1),
            "ratio": round(loop / eager, 3), "ratio_aten_matmul": round(aten / eager, 3),
            "product_loop_gain": round(loop / aten, 3)}
    # device_bench's count of the step's matrix FLOPs (mlp_training_flops_per_token), the same model on
    # both sides, and this core's sgemm peak measured in each of its runs; Titans' form only.
    flops = ours[0].get("flops_per_token")
    if flops:
        peak = statistics.median(r["sgemm_peak_gflops"] for r in ours)
        line.update({"flops_per_token": flops, "memscope_gflops": round(flops * loop / 1e9, 2),
                     "eager_gflops": round(flops * eager / 1e9, 2), "sgemm_peak_gflops": round(peak, 1),
                     "memscope_share_of_peak": round(flops * loop / 1e9 / peak, 3)})
    line.update({"aten_calls_nested": calls,
                 "rounds": sum(r["size"] == size and r["variant"] == "eager" for r in rows)})
    print(json.dumps(line))
PY
