// Sequential step vs chunkwise form, tokens/s (issue 3). One JSON line per configuration:
// structure × window c × optimiser (gd-momentum, muon = NS on, dgd) × chunk b, with the
// chunkwise/sequential ratio of the same run. Where the fused chunkwise form applies (linear, c = 1,
// gd-momentum or dgd), also the ATen dual form it replaces, and both with their backward; the ATen
// form's backward also with its whole chunks taken chunk by chunk (linear_chunk_scan.h off), with
// each one's count of ATen calls. The MLP
// memory's gd-momentum rows add the fused chunkwise form's GFLOP/s and this core's sgemm peak.
// Flags: --tokens T (default 2048), --quick (T = 256, b = 64 only), --heads H, --head-dim d; and
// filters --only linear|mlp, --c N, --optimiser NAME, --chunk b (one configuration: eager_compare.sh).
// Each form is timed once from a fresh state, by default; --warm runs it once untimed first and
// --reps R takes the median of R timed runs, as time_eager.py times the eager side (eager_compare.sh
// passes --warm, so that both sides of its chunkwise pairings are timed warm).
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/aten_call_count.h"
#include "bench/bench_timing.h"
#include "bench/sgemm_peak.h"
#include "model/memory/memory_layer.h"
#include "model/memory/memory_rule.h"
#include "model/util/allocator.h"
#include "model/util/compute_threads.h"
#include "model/util/small_block_cache.h"

using namespace memscope::model;

using memscope::bench::median;
using memscope::bench::seconds_of;

namespace {

// The products of the MLP memory's fused chunkwise form (fused_mlp_chunkwise.cpp) a token, in FLOPs,
// for chunk b, window c, heads H, head dim d and hidden 4d: per head and chunk, the m = b + c − 1
// keys' pass and backward at the chunk start (three d×4d products), the read (φ·q and a·a_q, the
// start and momentum terms of both weights, the two δ sums) and the chunk-end W and S of both
// weights. The projections and the clip's Gram matrices are not counted.
double mlp_chunk_flops_per_token(int64_t b, int64_t c, int64_t heads, int64_t d) {
  const double m = static_cast<double>(b + c - 1), n = static_cast<double>(b), dd = static_cast<double>(d),
               hidden = 4.0 * dd;
  const double keys = 3 * 2 * hidden * dd * m;
  const double read = 2 * m * dd * n + 4 * hidden * dd * n + 2 * hidden * m * n + 2 * m * hidden * n +
                      4 * dd * hidden * n + 2 * dd * m * n;
  const double end = 4 * 2 * dd * hidden * m;
  return static_cast<double>(heads) * (keys + read + end) / n;
}

}  // namespace

int main(int argc, char** argv) {
  memscope::model::keep_large_blocks_in_heap();  // model/util/allocator.h
  memscope::model::install_small_block_cache();  // model/util/small_block_cache.h
  int64_t tokens = 2048, heads = 4, head_dim = 64, reps = 1;
  bool quick = false, warm = false;
  std::string only, only_optimiser;
  int64_t only_c = 0, only_chunk = 0;  // 0: every one
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::atoll(argv[++i]) : 0; };
    if (!std::strcmp(argv[i], "--tokens")) tokens = next();
    else if (!std::strcmp(argv[i], "--heads")) heads = next();
    else if (!std::strcmp(argv[i], "--head-dim")) head_dim = next();
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--warm")) warm = true;
    else if (!std::strcmp(argv[i], "--reps")) reps = std::max<int64_t>(1, next());
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--c")) only_c = next();
    else if (!std::strcmp(argv[i], "--optimiser") && i + 1 < argc) only_optimiser = argv[++i];
    else if (!std::strcmp(argv[i], "--chunk")) only_chunk = next();
    else {
      std::cerr << "usage: memory_bench [--tokens T] [--heads H] [--head-dim d] [--quick] [--warm] [--reps R]"
                   " [--only linear|mlp]"
                   " [--c N] [--optimiser gd-momentum|muon|dgd] [--chunk b]\n";
      return 2;
    }
  }
  if (quick) tokens = std::min<int64_t>(tokens, 256);
  std::vector<int64_t> chunks = quick ? std::vector<int64_t>{64} : std::vector<int64_t>{1, 16, 64};
  if (only_chunk > 0) chunks = {only_chunk};
  memscope::model::set_compute_threads(1);  // ATen and OpenBLAS: one core, as every ratio here states
  torch::NoGradGuard no_grad;  // inference (stepping) cost; training adds the backward pass
  const double peak = memscope::bench::sgemm_peak(3);
  // One form's time: after a warm-up run with --warm, the median of --reps runs, each from a fresh
  // state (`run` makes its own).
  auto timed = [&](const std::function<void()>& run) {
    if (warm) run();
    std::vector<double> times;
    for (int64_t r = 0; r < reps; ++r) times.push_back(seconds_of(run));
    return median(times);
  };

  for (const char* structure : {"linear", "mlp"}) {
    if (!only.empty() && only != structure) continue;
    for (int64_t c : {1, 8}) {
      if (only_c > 0 && c != only_c) continue;
      for (const std::string optimiser : {"gd-momentum", "muon", "dgd"}) {
        if (!only_optimiser.empty() && optimiser != only_optimiser) continue;
        const bool ns = optimiser == "muon";
        const MemoryRule rule = load_memory_rule(
            "omeganet", {std::string("memory.structure=") + structure, "memory.feature_map.kind=identity",
                         "memory.window.c=" + std::to_string(c), "memory.optimiser=" + optimiser});
        torch::manual_seed(0);
        MemoryLayer layer(rule, MemoryLayerOptions{heads * head_dim, heads, head_dim});
        const torch::Tensor x = torch::randn({1, tokens, heads * head_dim});
        {  // warm-up (allocator, thread pool)
          MemoryState s = layer->initial_state(1);
          layer->forward(x.slice(1, 0, 32), s, 16);
          layer->forward_sequential(x.slice(1, 0, 8), s);
        }
        const double sequential = timed([&] {
          MemoryState s = layer->initial_state(1);
          layer->forward_sequential(x, s);
        });
        // Where the time goes: the q/k/v/gate projections are the same work in both forms
        // (batched over T in one, per token in the other).
        MemoryState sp = layer->initial_state(1);
        const double projection_batched = seconds_of([&] { layer->project(x, sp); });
        const double projection_per_token = seconds_of([&] {
          for (int64_t t = 0; t < tokens; ++t) layer->project(x.slice(1, t, t + 1), sp);
        });
        // The fused step (linear gd-momentum and dgd at c = 1) projects inside its own kernel: a
        // separate per-token projection then costs more than its whole step, and the split is
        // meaningless (null).
        const bool split = projection_per_token < sequential;
        // Linear memory at c = 1 (gd-momentum, dgd): the fused chunkwise form with its written-out
        // backward (fused_linear_chunkwise.cpp) against the ATen dual form it replaces, both
        // forward only and forward + backward (a training step's share), in the same run.
        const bool fused_form = std::string(structure) == "linear" && c == 1 && !ns;
        // The MLP memory's gd-momentum chunkwise form is the fused one (fused_mlp_chunkwise.cpp), for
        // inference: against its ATen dual form too, and its products' rate against this core's
        // sgemm peak, measured at the start.
        const bool fused_mlp = std::string(structure) == "mlp" && optimiser == "gd-momentum";
        for (int64_t b : chunks) {
          const double chunked = timed([&] {
            MemoryState sc = layer->initial_state(1);
            layer->forward(x, sc, b);
          });
          nlohmann::json aten = nullptr, train_fused = nullptr, train_aten = nullptr,
                         train_aten_loop = nullptr;
          nlohmann::json train_aten_calls = nullptr, train_aten_loop_calls = nullptr;
          if (fused_form) {
            auto train_step = [&] {
              torch::AutoGradMode grad_on(true);
              MemoryState st = layer->initial_state(1);
              layer->forward(x, st, b).y.sum().backward();
            };
            layer->set_fused_step(false);
            layer->set_chunk_scan(true);  // what a GPU runs (unset, the CPU takes the loop)
            aten = tokens / timed([&] {
              MemoryState sa = layer->initial_state(1);
              layer->forward(x, sa, b);
            });
            train_aten = tokens / timed(train_step);
            // The ATen form's whole chunks all at once (linear_chunk_scan.h) against chunk by chunk:
            // time, and the ATen calls of one forward and backward (a GPU's kernel launches).
            train_aten_calls = memscope::bench::aten_calls(train_step).top_level;
            layer->set_chunk_scan(false);
            train_aten_loop = tokens / timed(train_step);
            train_aten_loop_calls = memscope::bench::aten_calls(train_step).top_level;
            layer->set_chunk_scan(std::nullopt);
            layer->set_fused_step(true);
            train_fused = tokens / timed(train_step);
          }
          if (fused_mlp) {
            layer->set_fused_step(false);
            aten = tokens / timed([&] {
                     MemoryState sa = layer->initial_state(1);
                     layer->forward(x, sa, b);
                   });
            layer->set_fused_step(true);
          }
          const nlohmann::json chunk_gflops =
              fused_mlp
                  ? nlohmann::json(mlp_chunk_flops_per_token(b, c, heads, head_dim) * tokens / chunked / 1e9)
                  : nlohmann::json();
          std::cout << nlohmann::json{{"bench", "memory"},
                                      {"structure", structure},
                                      {"c", c},
                                      {"ns", ns},
                                      {"optimiser", optimiser},
                                      {"chunk", b},
                                      {"tokens", tokens},
                                      {"heads", heads},
                                      {"head_dim", head_dim},
                                      {"device", "cpu"},
                                      {"threads", at::get_num_threads()},
                                      {"sequential_tokens_per_s", tokens / sequential},
                                      {"chunkwise_tokens_per_s", tokens / chunked},
                                      {"chunkwise_aten_tokens_per_s", aten},
                                      {"train_fused_tokens_per_s", train_fused},
                                      {"train_aten_tokens_per_s", train_aten},
                                      {"train_aten_loop_tokens_per_s", train_aten_loop},
                                      {"train_aten_calls", train_aten_calls},
                                      {"train_aten_loop_calls", train_aten_loop_calls},
                                      {"ratio", sequential / chunked},
                                      {"chunkwise_gflops", chunk_gflops},
                                      {"sgemm_peak_gflops", peak},
                                      {"sequential_projection_share",
                                       split ? nlohmann::json(projection_per_token / sequential)
                                             : nlohmann::json()},
                                      {"chunkwise_projection_share", projection_batched / chunked},
                                      {"memory_only_ratio",
                                       split ? nlohmann::json((sequential - projection_per_token) /
                                                              std::max(1e-9, chunked - projection_batched))
                                             : nlohmann::json()}}
                           .dump()
                    << std::endl;
        }
      }
    }
  }
  return 0;
}
