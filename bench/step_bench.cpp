// The debugger's path, token by token (issue 20): tokens/s of the sequential memory-layer step and
// of the whole demo-mqar model's step, each with the record the probes read (a probed step) and
// without it (an unprobed step), and this core's sgemm peak measured in the same run. One JSON
// line per case. bench/eager_compare.sh runs it interleaved with the eager-PyTorch baseline.
// Flags: --tokens T (default 2048), --reps N (default 5; medians), --only layer|model,
//        --case titans|atlas|titans-mlp|atlas-mlp (one layer case), --general 1 (the model's general
//        step too, set_fused_step(false) on every memory layer, timed in the same run),
//        --model-preset P (default demo-mqar; bench/eager_compare.sh's model rounds use
//        demo-mqar-titans, the model bench/eager/eager_lm.py implements).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "bench/sgemm_peak.h"
#include "model/config/preset.h"
#include "model/memory/memory_layer.h"
#include "model/memory/memory_rule.h"
#include "model/train/trainer.h"
#include "model/util/allocator.h"
#include "model/util/compute_threads.h"
#include "model/util/small_block_cache.h"

using namespace memscope::model;

namespace {

using memscope::bench::median;
using memscope::bench::minor_faults;
using memscope::bench::seconds_of;
using memscope::bench::sgemm_peak;

// The two rules of the eager baseline (bench/eager/): Titans' (linear memory, gd-momentum, conv)
// and Atlas' (Muon), both at window c = 1 with identity features; and the two deep memories as
// their presets have them (titans-lmm: the MLP, gd with momentum, c = 1; atlas: the MLP, Muon, an
// Omega window of 8, polynomial features), each timed on the general step too (autograd's
// gradient; set_fused_step(false)) against the fused one (fused_mlp_step.cpp) in the same run.
struct LayerCase {
  const char* name;
  const char* preset;
  std::vector<std::string> sets;
  bool muon;
  bool mlp;
};

}  // namespace

int main(int argc, char** argv) {
  memscope::model::keep_large_blocks_in_heap();  // model/util/allocator.h
  memscope::model::install_small_block_cache();  // model/util/small_block_cache.h
  int64_t tokens = 2048, reps = 5;
  std::string only, only_case, model_preset = "demo-mqar";
  memscope::bench::BenchFlags flags("step_bench");
  flags.add("--tokens", tokens).add("--reps", reps).add("--only", only).add("--case", only_case);
  int general = 0;
  flags.add("--model-preset", model_preset).add("--general", general);
  if (!flags.parse(argc, argv)) return 2;
  set_compute_threads(1);  // ATen and OpenBLAS
  torch::NoGradGuard no_grad;  // stepping, as the debugger does
  const double peak = sgemm_peak(static_cast<int>(reps));
  const int64_t heads = 4, head_dim = 64, d = heads * head_dim;

  if (only.empty() || only == "layer") {
    const std::vector<LayerCase> cases{
        {"titans",
         "titans-lmm",
         {"memory.structure=linear", "memory.feature_map.kind=identity"},
         false,
         false},
        {"atlas", "atlas-linear", {"memory.window.c=1", "memory.feature_map.kind=identity"}, true, false},
        {"titans-mlp", "titans-lmm", {}, false, true},
        {"atlas-mlp", "atlas", {}, true, true}};
    for (const LayerCase& c : cases) {
      if (!only_case.empty() && only_case != c.name) continue;
      const MemoryRule rule = load_preset(c.preset, c.sets).memory;
      torch::manual_seed(0);
      MemoryLayer layer(rule, MemoryLayerOptions{d, heads, 0});
      // Muon is ~10× slower per token than gd, and ~100× on the MLP's 64×256 weights.
      const int64_t T = c.muon  ? std::max<int64_t>(64, tokens / (c.mlp ? 16 : 4))
                        : c.mlp ? tokens / 4
                                : tokens;
      const at::Tensor x = torch::randn({1, T, d});
      std::map<StepDetail, double> general_seconds;  // the MLP's general step, per detail
      for (const bool fused : c.mlp ? std::vector<bool>{false, true} : std::vector<bool>{true}) {
        layer->set_fused_step(fused);
        for (const StepDetail detail : {StepDetail::Record, StepDetail::OutputOnly}) {
          {  // untimed and uncounted, as the model's below
            MemoryState s = layer->initial_state(1);
            for (int64_t t = 0; t < std::min<int64_t>(T, 64); ++t) layer->step(x.select(1, t), s, 1, detail);
          }
          std::vector<double> times;
          const int64_t faults_before = minor_faults();
          for (int64_t r = 0; r < reps; ++r) {
            MemoryState s = layer->initial_state(1);
            times.push_back(seconds_of([&] {
              for (int64_t t = 0; t < T; ++t) layer->step(x.select(1, t), s, 1, detail);
            }));
          }
          const double faults_per_1000 =
              1000.0 * static_cast<double>(minor_faults() - faults_before) / static_cast<double>(reps * T);
          // Matmul FLOPs per token, as bench/eager/time_eager.py counts them: the projections
          // (q, k, v: 3·2·D²), the gates (3·2·D·H), the conv (2·4·3D when on), the prediction, the
          // outer product and the read (3·2·d² per head), and with Muon 5 Newton–Schulz iterations
          // of 6·d³ per head (nominal: the symmetric products are not discounted).
          // The MLP (hidden n = 4d, window c): per window row the pass W_2 z and W_1 a (4·d·n), the
          // backward W_1ᵀ δo and the two rank-1 gradients (6·d·n); the read's pass (4·d·n); Muon's NS
          // on both d×n weights, 5 iterations of X Xᵀ, A·A and B·X (2·d²n + 2·d³ + 2·d²n each). The
          // record's loss after the write (c more passes) is not counted.
          const double n = 4.0 * head_dim, window = rule.window,
                       dd = static_cast<double>(head_dim) * head_dim;
          const double memory_flops = c.mlp
                                          ? window * 10 * head_dim * n + 4 * head_dim * n +
                                                (c.muon ? 2 * 5 * (4.0 * dd * n + 2.0 * dd * head_dim) : 0.0)
                                          : 3 * 2.0 * dd + (c.muon ? 5 * 6.0 * dd * head_dim : 0.0);
          const double flops = 3 * 2.0 * d * d + 3 * 2.0 * d * heads + (rule.conv ? 2.0 * 4 * 3 * d : 0.0) +
                               heads * memory_flops;
          const double seconds = median(times);
          if (!fused) general_seconds[detail] = seconds;
          const double tps = static_cast<double>(T) / seconds;
          nlohmann::json line{{"bench", "step"},
                              {"case", std::string("layer/") + c.name},
                              {"fused", fused},
                              {"record", detail == StepDetail::Record},
                              {"tokens", T},
                              {"heads", heads},
                              {"head_dim", head_dim},
                              {"tokens_per_s", tps},
                              {"us_per_token", 1e6 / tps},
                              {"gflops", tps * flops / 1e9},
                              {"sgemm_peak_gflops", peak},
                              {"share_of_peak", tps * flops / 1e9 / peak},
                              {"minor_faults_per_1000_tokens", faults_per_1000}};
          if (fused && general_seconds.count(detail))
            line["speedup_over_general"] = general_seconds[detail] / seconds;
          std::cout << line.dump() << std::endl;
        }
      }
    }
  }

  if (only.empty() || only == "model") {
    // The model stepped as the engine steps it (batch 1, one token at a time).
    Trainer trainer(load_preset(model_preset));
    const LanguageModel& model = trainer.model();
    const Batch batch = trainer.training_batch(1);
    const at::Tensor sequence = batch.tokens.select(0, 0);
    const int64_t T = sequence.size(0);
    const int64_t rounds = std::max<int64_t>(1, tokens / T);  // about `tokens` tokens per timing
    // --general: every memory layer's general step too (set_fused_step(false)), timed first in the
    // same run, and the fused step's speed-up over it.
    auto set_fused = [&](bool on) {
      for (const auto& module : model->modules())
        if (auto* layer = dynamic_cast<MemoryLayerImpl*>(module.get())) layer->set_fused_step(on);
    };
    std::map<StepDetail, double> general_seconds;
    for (const bool fused : general != 0 ? std::vector<bool>{false, true} : std::vector<bool>{true})
      for (const StepDetail detail : {StepDetail::Record, StepDetail::OutputOnly}) {
        set_fused(fused);
        auto run = [&] {
          for (int64_t round = 0; round < rounds; ++round) {
            LmState state = model->initial_state(1);
            for (int64_t t = 0; t < T; ++t) model->step(sequence.narrow(0, t, 1), state, 1, detail);
          }
        };
        run();  // untimed and uncounted: the heap's first growth is not a fault per token
        std::vector<double> times;
        const int64_t faults_before = minor_faults();
        for (int64_t r = 0; r < reps; ++r) times.push_back(seconds_of(run));
        const double seconds = median(times), tps = static_cast<double>(rounds * T) / seconds;
        if (!fused) general_seconds[detail] = seconds;
        const double faults_per_1000 = 1000.0 * static_cast<double>(minor_faults() - faults_before) /
                                       static_cast<double>(reps * rounds * T);
        nlohmann::json line{{"bench", "step"},
                            {"case", "model/" + model_preset},
                            {"fused", fused},
                            {"minor_faults_per_1000_tokens", faults_per_1000},
                            {"record", detail == StepDetail::Record},
                            {"tokens", rounds * T},
                            {"tokens_per_s", tps},
                            {"us_per_token", 1e6 / tps},
                            {"sgemm_peak_gflops", peak}};
        if (fused && general_seconds.count(detail))
          line["speedup_over_general"] = general_seconds[detail] / seconds;
        std::cout << line.dump() << std::endl;
      }
  }
  return 0;
}
