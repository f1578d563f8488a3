#!/usr/bin/env bash
# memscope's sequential step against the eager-PyTorch loop a researcher would write (bench/eager/),
# in one run: REPS rounds (default 5), each timing memscope (bench/step_bench) and then eager
# Python, one thread each, so that machine noise hits both alike. Two pairings:
#   layer  the memory layer (Titans' and Atlas' rules, and their deep MLP memories, eager_mlp_memory.py,
#          checked first against memory-trace): one JSON line per rule with both medians, the ratio,
#          GFLOP/s and the share of this core's sgemm peak (step_bench measures it)
#   model  the whole demo-mqar-titans, demo-mqar and demo-mqar-hope models token by token (eager_lm.py,
#          checked first against memscope's recorded step of the same checkpoint): both medians and the
#          ratio; for HOPE also both GFLOP/s, for its math's FLOPs (hope_flops below), and the peak
#   chunkwise  the Titans and Atlas (Muon) layers' chunkwise forms at c = 1, b = 64 (memory_bench's
#          rows against time_eager.py's eager_chunkwise, the same configuration): both medians, the
#          ratio, and memscope's GFLOP/s counted for the per-token form it runs (below) against the peak;
#          and Titans' deep (MLP) memory's (memory_bench's MLP row against eager_mlp_memory.py's
#          chunkwise form, checked first against memory-trace --chunk), both GFLOP/s as they count them
#   train  demo-mqar-titans's training step (eager_lm_train.py, checked first against the loss and
#          gradient norm memscope's trainer reports for the same weights and batch)
# The deep (MLP) memory's training step has its own pairing: bench/deep_train_compare.sh.
# Needs Debian's python3-torch, for this benchmark only: apt-get install python3-torch.
# Usage: bench/eager_compare.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
STEP=${STEP:-build/bench/step_bench}
source bench/eager_python.sh eager_compare "$STEP"
REPS=${1:-5}
CLI=${CLI:-build/app/cli/memscope-cli}
# The model pairing's weights, and memscope's own step of them for eager_lm.py to be checked against.
rm -rf "$OUT/model.memscope"
"$CLI" train --preset demo-mqar-titans --steps 2 --out "$OUT/model.safetensors" --force >/dev/null
"$CLI" step --ckpt "$OUT/model.safetensors" --tokens 200 --probe-every 1 --record "$OUT/model.memscope" >/dev/null
"$CLI" export "$OUT/model.memscope" --csv "$OUT/model.csv" --force >/dev/null
"$PY" bench/eager/eager_lm.py --ckpt "$OUT/model.safetensors" --check "$OUT/model.csv" >>"$OUT/eager.jsonl"
# demo-mqar itself (Atlas: Muon, an Omega window of 4, polynomial features), checked the same way.
rm -rf "$OUT/atlas.memscope"
"$CLI" train --preset demo-mqar --steps 2 --out "$OUT/atlas.safetensors" --force >/dev/null
"$CLI" step --ckpt "$OUT/atlas.safetensors" --tokens 200 --probe-every 1 --record "$OUT/atlas.memscope" >/dev/null
"$CLI" export "$OUT/atlas.memscope" --csv "$OUT/atlas.csv" --force >/dev/null
"$PY" bench/eager/eager_lm.py --ckpt "$OUT/atlas.safetensors" --check "$OUT/atlas.csv" | sed 's/"eager_lm_check"/"eager_lm_check_atlas"/' >>"$OUT/eager.jsonl"
# demo-mqar-hope (HOPE blocks: the self-modifying memory and the CMS, eager_hope.SelfModStep and
# CmsStep), checked the same way.
rm -rf "$OUT/hope.memscope"
"$CLI" train --preset demo-mqar-hope --steps 2 --out "$OUT/hope.safetensors" --force >/dev/null
"$CLI" step --ckpt "$OUT/hope.safetensors" --tokens 200 --probe-every 1 --record "$OUT/hope.memscope" >/dev/null
"$CLI" export "$OUT/hope.memscope" --csv "$OUT/hope.csv" --force >/dev/null
"$PY" bench/eager/eager_lm.py --ckpt "$OUT/hope.safetensors" --check "$OUT/hope.csv" | sed 's/"eager_lm_check"/"eager_lm_check_hope"/' >>"$OUT/eager.jsonl"
# The training pairing's batch: step 3's, recorded row by row with the weights from before it.
rm -rf "$OUT/train.memscope"
"$CLI" step --ckpt "$OUT/model.safetensors" --set train.steps=3 --train-step 3 --record "$OUT/train.memscope" >/dev/null
"$CLI" export "$OUT/train.memscope" --csv "$OUT/train.csv" --force >/dev/null
STEP3=$("$CLI" train --preset demo-mqar-titans --steps 3 --json | grep '"step":3,' | grep -v eval)
"$PY" bench/eager/eager_lm_train.py --ckpt "$OUT/model.safetensors" --batch-csv "$OUT/train.csv" --chunk 4 \
  --check-loss "$(echo "$STEP3" | "$PY" -c 'import json,sys;print(json.load(sys.stdin)["loss"])')" \
  --check-grad-norm "$(echo "$STEP3" | "$PY" -c 'import json,sys;print(json.load(sys.stdin)["grad_norm"])')" >>"$OUT/eager.jsonl"
# The deep (MLP) memory layers: eager (autograd's inner gradient per token) checked against the trace.
"$PY" bench/eager/eager_mlp_memory.py --check >>"$OUT/eager.jsonl"
DEVICE_BENCH=${DEVICE_BENCH:-build/bench/device_bench}
MEMORY_BENCH=${MEMORY_BENCH:-build/bench/memory_bench}
for _ in $(seq 1 "$REPS"); do
  # --warm: one untimed run first, as time_eager.py times the eager side.
  "$MEMORY_BENCH" --warm --only linear --c 1 --optimiser gd-momentum --chunk 64 >>"$OUT/memscope.jsonl"
  "$MEMORY_BENCH" --warm --only linear --c 1 --optimiser muon --chunk 64 >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/time_eager.py --bench eager_chunkwise --chunk 64 --reps 1 >>"$OUT/eager.jsonl"
  "$MEMORY_BENCH" --warm --only mlp --c 1 --optimiser gd-momentum --chunk 64 >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/eager_mlp_memory.py --time-chunkwise 64 --reps 1 >>"$OUT/eager.jsonl"
  "$STEP" --only layer --reps 1 >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/time_eager.py --bench eager_layer --reps 1 >>"$OUT/eager.jsonl"
  "$PY" bench/eager/eager_mlp_memory.py --time 512 --reps 1 >>"$OUT/eager.jsonl"
  "$STEP" --only model --model-preset demo-mqar-titans --tokens 512 --reps 1 >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/eager_lm.py --ckpt "$OUT/model.safetensors" --time 512 --reps 1 >>"$OUT/eager.jsonl"
  "$STEP" --only model --model-preset demo-mqar --tokens 512 --reps 1 >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/eager_lm.py --ckpt "$OUT/atlas.safetensors" --time 512 --reps 1 |
    sed 's/"eager_lm"/"eager_lm_atlas"/' >>"$OUT/eager.jsonl"
  "$STEP" --only model --model-preset demo-mqar-hope --tokens 512 --reps 1 >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/eager_lm.py --ckpt "$OUT/hope.safetensors" --time 512 --reps 1 --case model/demo-mqar-hope |
    sed 's/"eager_lm"/"eager_lm_hope"/' >>"$OUT/eager.jsonl"
  "$DEVICE_BENCH" --device cpu --only train-demo --train-steps 10 >>"$OUT/memscope.jsonl"
  "$PY" bench/eager/eager_lm_train.py --ckpt "$OUT/model.safetensors" --batch-csv "$OUT/train.csv" --chunk 4 \
    --time 10 >>"$OUT/eager.jsonl"
done

"$PY" - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
ours = [json.loads(l) for l in open(f"{out}/memscope.jsonl") if l.startswith("{")]
eager = [json.loads(l) for l in open(f"{out}/eager.jsonl") if l.startswith("{")]
for rule in ("titans", "atlas"):
    e = [r for r in eager if r["bench"] == "eager_layer" and r.get("rule") == rule]
    e_tps = statistics.median(r["tokens_per_s"] for r in e)
    for record in (False, True):
        m = [r for r in ours if r.get("case") == f"layer/{rule}" and r["record"] == record]
        tps = statistics.median(r["tokens_per_s"] for r in m)
        gflops = statistics.median(r["gflops"] for r in m)
        peak = statistics.median(r["sgemm_peak_gflops"] for r in m)
        print(json.dumps({"bench": "eager_compare", "rule": rule, "step": "probed" if record else "unprobed",
                          "memscope_tokens_per_s": round(tps, 1), "eager_tokens_per_s": round(e_tps, 1),
                          "ratio": round(tps / e_tps, 3), "memscope_gflops": round(gflops, 2),
                          "sgemm_peak_gflops": round(peak, 1), "share_of_peak": round(gflops / peak, 3),
                          "rounds": len(m)}))
# The MLP layers: memscope's fused step, and its general step (autograd) in the same step_bench run.
for rule in ("titans-mlp", "atlas-mlp"):
    e = [r for r in eager if r["bench"] == "eager_mlp_layer" and r.get("rule") == rule]
    if not e:
        continue
    e_tps = statistics.median(r["tokens_per_s"] for r in e)
    for record in (False, True):
        rows = [r for r in ours if r.get("case") == f"layer/{rule}" and r["record"] == record]
        m = [r for r in rows if r.get("fused")]
        g = [r for r in rows if r.get("fused") is False]
        tps = statistics.median(r["tokens_per_s"] for r in m)
        gflops = statistics.median(r["gflops"] for r in m)
        peak = statistics.median(r["sgemm_peak_gflops"] for r in m)
        print(json.dumps({"bench": "eager_compare", "rule": rule, "step": "probed" if record else "unprobed",
                          "memscope_tokens_per_s": round(tps, 1), "eager_tokens_per_s": round(e_tps, 1),
                          "ratio": round(tps / e_tps, 3),
                          "memscope_general_tokens_per_s":
                              round(statistics.median(r["tokens_per_s"] for r in g), 1),
                          "memscope_gflops": round(gflops, 2), "sgemm_peak_gflops": round(peak, 1),
                          "share_of_peak": round(gflops / peak, 3), "rounds": len(m)}))
# HOPE's FLOPs per token, counted for its math (d = D = 64, MLP memories of hidden 4d, two blocks),
# not for either side's code, with 2 per multiply-add: one MLP memory's pass W_1 GELU(W_2 z) is 16d².
# The self-modifying memory: q (2d²); the four projection memories at x and again at v for their
# targets (128d²); all five at k for the inner gradient (80d²) and dh = W_1ᵀ do (40d²); the five dgd
# writes, two rank-one updates of 8d² and two scalings of 4d² each (120d²); the main memory's read
# after its write (16d²). Each of the three CMS levels: its read (16d²), k and v (4d²), the pass at k
# and dh (24d²) and the gradient's two outer products (16d²). Then W_memory_out (2d²) per block.
def hope_flops(d=64, blocks=2, levels=3):
    selfmod = (2 + 128 + 80 + 40 + 120 + 16) * d * d
    return blocks * (selfmod + levels * 60 * d * d + 2 * d * d)
peak = statistics.median(r["sgemm_peak_gflops"] for r in ours if "sgemm_peak_gflops" in r)
for model, eager_bench in (("demo-mqar-titans", "eager_lm"), ("demo-mqar", "eager_lm_atlas"),
                           ("demo-mqar-hope", "eager_lm_hope")):
    e = [r for r in eager if r["bench"] == eager_bench]
    if not e:
        print(json.dumps({"bench": "eager_compare", "model": model, "missing": True}))
        continue
    e_tps = statistics.median(r["tokens_per_s"] for r in e)
    for record in (False, True):
        m = [r for r in ours if r.get("case") == f"model/{model}" and r["record"] == record]
        tps = statistics.median(r["tokens_per_s"] for r in m)
        row = {"bench": "eager_compare", "model": model, "step": "probed" if record else "unprobed",
               "memscope_tokens_per_s": round(tps, 1), "eager_tokens_per_s": round(e_tps, 1),
               "ratio": round(tps / e_tps, 3), "rounds": len(m)}
        if model == "demo-mqar-hope":
            row.update({"mflop_per_token": round(hope_flops() / 1e6, 2),
                        "memscope_gflops": round(tps * hope_flops() / 1e9, 2),
                        "eager_gflops": round(e_tps * hope_flops() / 1e9, 2), "sgemm_peak_gflops": round(peak, 1)})
        print(json.dumps(row))
# The chunkwise layers, c = 1, b = 64. memscope runs both per token, so its FLOPs are counted for
# that form: per token the q/k/v projection 2·D·3D and the gates 3·2·D·H, and per token and head
#   titans (fused_linear_chunkwise.cpp): e = M̄φ − v, the S and M updates and the read, 2d² each (8d²);
#   atlas, Muon (in inference the fused step per token with the gradient point frozen at the chunk
#     start, chunkwise_forward.cpp): the prediction, the gradient and the read (6d²) and NS (30d³).
# Eager's forms have their own counts (time_eager.py); the ratio of tokens/s is what compares them.
def chunkwise_pair(rule, optimiser, per_head_flops, memscope_extra):
    m = [r for r in ours if r.get("bench") == "memory" and r.get("structure") == "linear" and r.get("chunk") == 64
         and r.get("c") == 1 and r.get("optimiser") == optimiser]
    e = [r for r in eager if r["bench"] == "eager_chunkwise" and r.get("rule") == rule]
    if not (m and e):
        return
    H, d = m[0]["heads"], m[0]["head_dim"]
    D = H * d
    flops = 2 * D * 3 * D + 3 * 2 * D * H + H * per_head_flops(d)
    tps = statistics.median(r["chunkwise_tokens_per_s"] for r in m)
    e_tps = statistics.median(r["tokens_per_s"] for r in e)
    e_gflops = statistics.median(r["gflops"] for r in e)
    peak = statistics.median(r["sgemm_peak_gflops"] for r in ours if "sgemm_peak_gflops" in r)
    print(json.dumps({"bench": "eager_compare", "chunkwise": f"{rule} ({optimiser}) c=1 b=64",
                      "memscope_tokens_per_s": round(tps, 1), "eager_tokens_per_s": round(e_tps, 1),
                      "ratio": round(tps / e_tps, 3),
                      **{name: round(statistics.median(r[key] for r in m), 1) for name, key in memscope_extra},
                      "memscope_gflops": round(tps * flops / 1e9, 2), "sgemm_peak_gflops": round(peak, 1),
                      "share_of_peak": round(tps * flops / 1e9 / peak, 3), "eager_gflops": round(e_gflops, 2),
                      "eager_share_of_peak": round(e_gflops / peak, 3), "rounds": len(m)}))
chunkwise_pair("titans", "gd-momentum", lambda d: 8 * d * d,
               [("memscope_aten_form_tokens_per_s", "chunkwise_aten_tokens_per_s")])
chunkwise_pair("atlas", "muon", lambda d: 6 * d * d + 30 * d ** 3,
               [("memscope_sequential_tokens_per_s", "sequential_tokens_per_s")])
# The MLP memory's chunkwise form (Titans' rule): memscope's fused form (fused_mlp_chunkwise.cpp) and
# its ATen form, against eager's dual form; each side's GFLOP/s as its bench counts its products.
m = [r for r in ours if r.get("bench") == "memory" and r.get("structure") == "mlp" and r.get("chunk") == 64]
e = [r for r in eager if r["bench"] == "eager_mlp_chunkwise"]
if m and e:
    tps, e_tps = statistics.median(r["chunkwise_tokens_per_s"] for r in m), statistics.median(r["tokens_per_s"] for r in e)
    peak = statistics.median(r["sgemm_peak_gflops"] for r in m)
    print(json.dumps({"bench": "eager_compare", "chunkwise": "titans-mlp (gd-momentum) c=1 b=64",
                      "memscope_tokens_per_s": round(tps, 1), "eager_tokens_per_s": round(e_tps, 1),
                      "ratio": round(tps / e_tps, 3),
                      "memscope_aten_form_tokens_per_s": round(statistics.median(r["chunkwise_aten_tokens_per_s"] for r in m), 1),
                      "memscope_sequential_tokens_per_s": round(statistics.median(r["sequential_tokens_per_s"] for r in m), 1),
                      "memscope_gflops": round(statistics.median(r["chunkwise_gflops"] for r in m), 2),
                      "sgemm_peak_gflops": round(peak, 1),
                      "eager_gflops": round(statistics.median(r["gflops"] for r in e), 2), "rounds": len(m)}))
m = [r for r in ours if r.get("case") == "train/demo-mqar-titans"]
e = [r for r in eager if r["bench"] == "eager_lm_train"]
tps, e_tps = statistics.median(r["tokens_per_s"] for r in m), statistics.median(r["tokens_per_s"] for r in e)
print(json.dumps({"bench": "eager_compare", "train": "demo-mqar-titans", "memscope_tokens_per_s": round(tps, 1),
                  "eager_tokens_per_s": round(e_tps, 1), "ratio": round(tps / e_tps, 3),
                  "memscope_step_ms": round(statistics.median(r["step_ms"] for r in m), 2),
                  "eager_step_ms": round(statistics.median(r["step_ms"] for r in e), 2), "rounds": len(m)}))
for check in (r for r in eager if r["bench"] == "eager_mlp_check"):
    print(json.dumps(check))
for name in ("eager_lm_check", "eager_lm_check_atlas", "eager_lm_check_hope", "eager_lm_train_check"):
    check = [r for r in eager if r["bench"] == name]
    print(json.dumps(check[0] if check else {"bench": name, "missing": True}))
PY
