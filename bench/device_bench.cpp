// memscope on a device (issue 23): the debugger's step and the training step with the model where
// --device puts it (default: CUDA when there is one), timed with the device synchronised, so the
// figures are wall time a user sees. bench/gpu.sh runs it beside the eager-PyTorch baseline
// (bench/eager/time_eager.py --device cuda) and the GPU's measured peak (bench/eager/gpu_peak.py).
//
// One JSON line per case (--only picks one):
//   layer      the memory layer's sequential step, batch 1, token by token: Titans (linear,
//              gd-momentum, conv) and Atlas (Muon), the two rules of bench/eager/; unprobed and probed
//   chunkwise  the memory layer's chunkwise form (Titans' rule, chunk 64) over --tokens tokens
//   fla-shape  (only when asked) the chunkwise recurrence at FLA's published shape, B1 T8192 H96
//              D128: Gated DeltaNet's, beside FLA's 1.27 ms on a GB200, and Titans', for the eager
//              side (time_eager.py --bench eager_recurrence); --fla-tokens T, --fla-heads H
//   model      demo-mqar, demo-mqar-titans (bench/eager/eager_lm.py's models) and a larger model
//              (d_model 512, 8 layers) stepped token by token, batch 1, one stream of --tokens
//              tokens (the larger model half as many); with and without the CUDA graph
//   train      training steps of that larger model on T = 2048 (task copy), tokens/s and MFU, and
//              one step's ATen calls
//   train-demo training steps of demo-mqar-titans as its preset has them (batch 16, chunk 4):
//              the pairing of bench/eager/eager_lm_train.py in bench/eager_compare.sh
//   train-demo-mlp  the same for demo-mqar-titans-mlp: the deep (MLP) memory, trained through
//              its inner gradient (eager_lm_train.py's mlp_chunkwise pairing); --train-set
//              KEY=VALUE (repeatable) changes either preset, e.g. to a larger model
//   train-preset the same for --train-preset NAME (default demo-mqar-hope), e.g. HOPE or
//              demo-mqar-atlas-mlp, which have no eager pairing
// Flags: --device D, --tokens T (default 2048), --reps N (default 5; medians), --only CASE,
//        --train-batch B (default 8), --train-steps N (default 5, after 2 warm-up steps),
//        --profile PREFIX (train: one more step per dtype under Kineto, LibTorch 2.x; a trace
//        for bench/eager/trace_summary.py), --fused-memory 0 (train: the memory's ATen forms even
//        on the CPU, where the fused ones apply: the path CUDA takes, for counting its calls),
//        --chunk-scan 0|1 (train: the linear memory's whole chunks one by one, or all at once,
//        linear_chunk_scan.h; by default at once off the CPU only), --dtype all|float32|bf16
//        (train: float32, then bf16 autocast on CUDA only (all, the default), or just the one,
//        on any device: bf16 on the CPU counts the calls that autocast adds), --graph all|on|off
//        (train on CUDA: the training pass as a CUDA graph (engine.cuda_graph,
//        model/train/graphed_train_pass.h) and without, or just the one; elsewhere no graph),
//        --op-times N (train-demo, train-demo-mlp, train-preset: one more step with its N costliest operators
//        by self time in the line, aten_op_times.h).
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/aten_call_count.h"
#include "bench/aten_op_times.h"
#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "bench/kineto_trace.h"
#include "bench/sgemm_peak.h"
#include "model/config/preset.h"
#include "model/memory/linear_chunk_scan.h"
#include "model/memory/memory_layer.h"
#include "model/memory/memory_rule.h"
#include "model/nn/graphed_step.h"
#include "model/train/graphed_train_pass.h"
#include "model/train/trainer.h"
#include "model/util/allocator.h"
#include "model/util/compute_threads.h"
#include "model/util/device.h"
#include "model/util/small_block_cache.h"

using namespace memscope::model;
using memscope::bench::aten_calls;
using memscope::bench::aten_op_times;
using memscope::bench::AtenCalls;
using memscope::bench::median;
using memscope::bench::OpTime;
using memscope::bench::seconds_of;
using memscope::bench::sgemm_peak;

namespace {

c10::Device device = c10::Device("cpu");

void sync() {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// Wall seconds of f with the device idle before and finished after: what the user waits.
double synced_seconds(const std::function<void()>& f) {
  sync();
  return seconds_of([&] {
    f();
    sync();
  });
}

nlohmann::json line(const std::string& case_name) {
  return {{"bench", "device"}, {"case", case_name}, {"device", describe_device(device)}};
}

// The larger model of issue 23: d_model 512, 8 MAG layers, Titans' linear memory (8 heads of 64).
std::vector<std::string> large_model_sets() {
  return {"model.d_model=512", "model.layers=8", "model.memory_heads=8", "model.attention_heads=8",
          "model.window=64", "model.persistent=0"};
}

void bench_layer(int64_t tokens, int64_t reps) {
  struct LayerCase {
    const char* name;
    const char* preset;
    std::vector<std::string> sets;
  };
  const int64_t heads = 4, d = 256;
  const std::vector<LayerCase> cases{
      {"titans", "titans-lmm", {"memory.structure=linear", "memory.feature_map.kind=identity"}},
      {"atlas", "atlas-linear", {"memory.window.c=1", "memory.feature_map.kind=identity"}}};
  for (const LayerCase& c : cases) {
    torch::manual_seed(0);
    MemoryLayer layer(load_preset(c.preset, c.sets).memory, MemoryLayerOptions{d, heads, 0});
    layer->to(device);
    const at::Tensor x = torch::randn({1, tokens, d}).to(device);
    for (const StepDetail detail : {StepDetail::OutputOnly, StepDetail::Record}) {
      std::vector<double> times;
      for (int64_t r = 0; r < reps + 1; ++r) {  // the first is a warm-up
        MemoryState s = layer->initial_state(1);
        const double t = synced_seconds([&] {
          for (int64_t i = 0; i < tokens; ++i) layer->step(x.select(1, i), s, 1, detail);
        });
        if (r > 0) times.push_back(t);
      }
      const double tps = static_cast<double>(tokens) / median(times);
      auto j = line(std::string("layer/") + c.name);
      j.update({{"record", detail == StepDetail::Record}, {"tokens", tokens}, {"tokens_per_s", tps},
                {"us_per_token", 1e6 / tps}});
      std::cout << j.dump() << std::endl;
    }
  }
}

void bench_chunkwise(int64_t tokens, int64_t reps) {
  const int64_t heads = 4, d = 256, chunk = 64;
  torch::manual_seed(0);
  MemoryLayer layer(load_preset("omeganet", {"memory.structure=linear", "memory.feature_map.kind=identity"}).memory,
                    MemoryLayerOptions{d, heads, 0});
  layer->to(device);
  const at::Tensor x = torch::randn({1, tokens, d}).to(device);
  std::vector<double> times;
  for (int64_t r = 0; r < reps + 1; ++r) {
    MemoryState s = layer->initial_state(1);
    const double t = synced_seconds([&] { layer->forward(x, s, chunk); });
    if (r > 0) times.push_back(t);
  }
  const double tps = static_cast<double>(tokens) / median(times);
  auto j = line("chunkwise/titans");
  j.update({{"chunk", chunk}, {"tokens", tokens}, {"tokens_per_s", tps}, {"ms", 1e3 * median(times)}});
  std::cout << j.dump() << std::endl;
}

// FLA's published figure (issue 23): chunk_gated_delta_rule's forward at 1.27 ms for B1 T8192 H96
// D128 on a GB200, in bf16, on inputs already projected. memscope's counterpart at that shape (by
// default; --fla-tokens and --fla-heads shrink it for a CPU): the chunkwise recurrence alone, the
// chunk scan (linear_chunk_scan.h) that CUDA takes, on the tokens a real layer projected (d_model
// 256 in, heads of 128), and the layer's whole forward with those small projections. Two rules:
// Gated DeltaNet, FLA's; and Titans' (gd-momentum), which bench/eager/time_eager.py's
// eager_recurrence runs at the same shape. The state is float32, as always. FLOPs by time_eager.py's
// count, 10d² + 4bd + 2b² + 2b per token and head.
void bench_fla_shape(int64_t T, int64_t H, int64_t reps) {
  const int64_t B = 1, D = 128, chunk = 64, d_in = 256;
  constexpr double kFlaMs = 1.27;
  struct Rule {
    const char* name;
    const char* preset;
    std::vector<std::string> sets;
  };
  const std::vector<Rule> rules{{"gated-deltanet", "gated-deltanet", {}},
                                {"titans", "titans-lmm", {"memory.structure=linear", "memory.feature_map.kind=identity"}}};
  for (const Rule& rule : rules) {
    torch::manual_seed(0);
    MemoryLayer layer(load_preset(rule.preset, rule.sets).memory, MemoryLayerOptions{d_in, H, D});
    layer->to(device);
    const at::Tensor x = torch::randn({B, T, d_in}).to(device);
    MemoryState scratch = layer->initial_state(B);
    const ProjectedTokens p = layer->project(x, scratch);
    auto heads_first = [](const at::Tensor& t) { return t.transpose(1, 2); };  // as chunkwise_forward.cpp
    const ChunkScanInputs in{heads_first(p.phi_k), heads_first(p.phi_q), heads_first(p.v),
                             heads_first(p.retain), heads_first(p.lr),    heads_first(p.momentum),
                             heads_first(p.gamma),  heads_first(p.delta)};
    if (linear_chunk_scan_tokens(layer->rule(), scratch, T, chunk, false) != T) {
      std::cerr << "device_bench: the chunk scan does not take " << rule.name << "'s rule at T = " << T << "\n";
      continue;
    }
    std::vector<double> scan_times, layer_times;
    for (int64_t r = 0; r < reps + 1; ++r) {  // the first is a warm-up
      MemoryState a = layer->initial_state(B), b = layer->initial_state(B);
      const double scan = synced_seconds([&] { linear_chunk_scan(*layer, in, T, chunk, a); });
      const double whole = synced_seconds([&] { layer->forward(x, b, chunk); });
      if (r > 0) {
        scan_times.push_back(scan);
        layer_times.push_back(whole);
      }
    }
    const double d = static_cast<double>(D), n = static_cast<double>(chunk);
    const double flops = static_cast<double>(B * T * H) * (10 * d * d + 4 * n * d + 2 * n * n + 2 * n);
    const double scan_s = median(scan_times);
    auto j = line("fla-shape");
    j.update({{"rule", rule.name}, {"batch", B}, {"tokens", T}, {"heads", H}, {"head_dim", D}, {"chunk", chunk},
              {"dtype", "float32"}, {"tokens_per_s", static_cast<double>(B * T) / scan_s},
              {"recurrence_ms", 1e3 * scan_s}, {"layer_ms", 1e3 * median(layer_times)}, {"gflop", flops / 1e9},
              {"recurrence_tflops", flops / scan_s / 1e12}});
    // FLA's figure is for its shape only.
    if (T == 8192 && H == 96) j.update({{"fla_gb200_bf16_ms", kFlaMs}, {"fla_over_memscope", kFlaMs / (1e3 * scan_s)}});
    std::cout << j.dump() << std::endl;
  }
}

// One stream of `tokens` tokens (ids i mod V, as bench/eager/eager_lm.py steps them), batch 1,
// token by token: unprobed and probed (a whole record), then the same through GraphedStep where it
// applies (the engine's inspect path on CUDA, engine.cuda_graph). `steady` times the tokens after
// the attention caches are full. Before 2026-11-28's sixth session the first window − 1 tokens
// stepped eagerly; now the graph takes them too, on caches padded to the window (`replays` counts
// the tokens it took, over all repetitions and the warm-up).
void bench_model(const std::string& name, const Preset& preset, int64_t tokens, int64_t reps) {
  Trainer trainer(preset);
  const LanguageModel& model = trainer.model();
  const LmConfig& config = model->config();
  const at::Tensor sequence = at::remainder(at::arange(tokens, at::kLong), config.vocab).to(device);
  const int64_t warm = std::min<int64_t>(tokens - 1, config.has_attention() ? config.window - 1 : 0);
  for (const bool graph : {false, true}) {
    if (graph && !(device.is_cuda() && GraphedStep::capture_available())) continue;
    for (const StepDetail detail : {StepDetail::OutputOnly, StepDetail::Record}) {
      GraphedStep graphed(/*capture=*/true);
      std::vector<double> whole, steady;
      for (int64_t r = 0; r < reps + 1; ++r) {
        LmState state = model->initial_state(1);
        auto step = [&](int64_t i) {
          const at::Tensor token = sequence.narrow(0, i, 1);
          if (graph && GraphedStep::applies(*model, state, 1))
            graphed.step(*model, token, state, detail);
          else
            model->step(token, state, 1, detail);
        };
        const double head = synced_seconds([&] {
          for (int64_t i = 0; i < warm; ++i) step(i);
        });
        const double rest = synced_seconds([&] {
          for (int64_t i = warm; i < tokens; ++i) step(i);
        });
        if (r > 0) {  // the first is a warm-up (and the graphs' capture)
          whole.push_back(head + rest);
          steady.push_back(rest);
        }
      }
      const double tps = static_cast<double>(tokens) / median(whole);
      auto j = line("model/" + name);
      j.update({{"record", detail == StepDetail::Record},
                {"graph", graph},
                {"tokens", tokens},
                {"tokens_per_s", tps},
                {"us_per_token", 1e6 / tps},
                {"steady_us_per_token", 1e6 * median(steady) / static_cast<double>(tokens - warm)},
                {"captures", graphed.captures()},
                {"replays", graphed.replays()},
                {"d_model", config.d_model},
                {"layers", config.layers}});
      std::cout << j.dump() << std::endl;
    }
  }
}

// The median wall time of `steps` training steps after 2 warm-up steps; `loss` gets the last one's.
double median_step_seconds(Trainer& trainer, int64_t steps, double* loss = nullptr) {
  std::vector<double> times;
  for (int64_t i = 0; i < steps + 2; ++i) {
    const double t = synced_seconds([&] {
      const double l = trainer.train_step().loss;
      if (loss) *loss = l;
    });
    if (i >= 2) times.push_back(t);
  }
  return median(times);
}

// Matmul FLOPs of one training token (forward + backward = 3 × forward), the count the MFU uses:
// 6·N for the N weights every token multiplies (all parameters but the embedding table, plus the
// tied head's D·V), the attention's scores and mix 12·L·D·w over a window of w keys, and the
// chunkwise memory's per-token products (bench/eager/time_eager.py's count, 10d² + 4bd + 2b² + 2b
// per head) three times. Elementwise work is not counted.
double training_flops_per_token(const Trainer& trainer, int64_t chunk) {
  const LmConfig& m = trainer.preset().model;
  double weights = 0;
  for (const auto& p : trainer.model()->named_parameters())
    if (p.key() != "embedding") weights += static_cast<double>(p.value().numel());
  weights += static_cast<double>(m.d_model) * static_cast<double>(trainer.task().vocab_size());
  const double d = static_cast<double>(m.d_model / m.memory_heads), b = static_cast<double>(chunk);
  const double memory = static_cast<double>(m.memory_heads) * (10 * d * d + 4 * b * d + 2 * b * b + 2 * b);
  return 6 * weights + 12.0 * m.layers * m.d_model * m.window + 3.0 * m.layers * memory;
}

// The same count for the MLP memory's chunkwise form (demo-mqar-titans-mlp): 6·N for the weights
// but the memory's initial W₁, W₂, the attention's 12·L·D·w where a block has one (MAG), and three
// times the MLP dual form's products per token and head at chunk b, hidden 4d
// (bench/eager/eager_mlp_memory.py's chunkwise_flops_per_token): the keys' pass and inner gradient,
// the read, the chunk end's W and S, and the b×b decay products.
double mlp_training_flops_per_token(const Trainer& trainer, int64_t chunk) {
  const LmConfig& m = trainer.preset().model;
  double weights = 0;
  for (const auto& p : trainer.model()->named_parameters()) {
    const std::string& name = p.key();
    const bool initial_memory = name.size() > 5 && (name.compare(name.size() - 5, 5, ".w1_0") == 0 ||
                                                    name.compare(name.size() - 5, 5, ".w2_0") == 0);
    if (name != "embedding" && !initial_memory) weights += static_cast<double>(p.value().numel());
  }
  weights += static_cast<double>(m.d_model) * static_cast<double>(trainer.task().vocab_size());
  const double d = static_cast<double>(m.d_model / m.memory_heads), n = static_cast<double>(chunk), h = 4 * d;
  const double keys = 3 * 2 * h * d;
  const double read =
      (2 * n * d * n + 4 * h * d * n + 2 * h * n * n + 2 * n * h * n + 4 * d * h * n + 2 * d * n * n) / n;
  const double end = 4 * 2 * d * h, decay = (2 * n * n * n + 2 * n * n) / n;
  const double memory = static_cast<double>(m.memory_heads) * (keys + read + end + decay);
  const double attention = m.block == BlockKind::Mag ? 12.0 * m.layers * m.d_model * m.window : 0.0;
  return 6 * weights + attention + 3.0 * m.layers * memory;
}

// One configuration of bench_train, one JSON line (and a profiled step with --profile).
void bench_train_once(int64_t batch, int64_t steps, const std::string& profile, bool fused_memory,
                      int64_t chunk_scan, bool bf16, bool graph) {
  std::vector<std::string> sets = large_model_sets();
  for (const char* s : {"task.kind=copy", "task.seq_len=2048", "task.values=64", "task.copy_tokens=64",
                        "train.chunk=64", "train.module_norms=false"})
    sets.push_back(s);
  sets.push_back("train.batch=" + std::to_string(batch));
  sets.push_back(std::string("train.bf16_autocast=") + (bf16 ? "true" : "false"));
  sets.push_back(std::string("engine.cuda_graph=") + (graph ? "true" : "false"));
  Trainer trainer(load_preset("demo-mqar-titans", sets));
  LanguageModel model = trainer.model();
  for (int64_t i = 0; i < model->layers(); ++i)
    if (model->block(i)->memory) {
      model->block(i)->memory->set_fused_step(fused_memory);
      if (chunk_scan >= 0) model->block(i)->memory->set_chunk_scan(chunk_scan == 1);
    }
  double loss = 0;
  const double seconds = median_step_seconds(trainer, steps, &loss);
  // One more step's ATen calls: the kernel launches that bound it on a GPU (aten_call_count.h).
  const AtenCalls calls = aten_calls([&] {
    trainer.train_step();
    sync();
  });
  const double tokens = static_cast<double>(batch) * 2048;
  const double tps = tokens / seconds;
  const double flops = training_flops_per_token(trainer, 64);
  auto j = line("train/large");
  j.update({{"batch", batch},
            {"seq_len", 2048},
            {"tokens_per_s", tps},
            {"step_ms", 1e3 * seconds},
            {"flops_per_token", flops},
            {"tflops", tps * flops / 1e12},
            {"loss", loss},
            {"aten_calls", calls.top_level},
            {"aten_calls_nested", calls.all},
            {"memory_form",
             std::string(fused_memory ? "default" : "aten") + (chunk_scan == 1   ? ", chunk scan"
                                                               : chunk_scan == 0 ? ", chunk by chunk"
                                                                                 : "")},
            {"dtype", bf16 ? "bf16-autocast" : "float32"},
            {"graph", graph}});
  if (const GraphedTrainPass* g = trainer.graphed_pass()) {
    j["captures"] = g->captures();
    j["replays"] = g->replays();
    if (!g->failure().empty()) j["graph_failure"] = g->failure();
  }
  std::cout << j.dump() << std::endl;
  if (!profile.empty()) {
    const std::string path =
        profile + "-" + j["dtype"].get<std::string>() + (graph ? "-graph" : "") + ".json";
    const std::string error = memscope::bench::save_kineto_trace(path, [&] {
      trainer.train_step();
      sync();
    });
    auto p = line("train/large profile");
    p["dtype"] = j["dtype"];
    p["graph"] = graph;
    if (error.empty())
      p["trace"] = path;
    else
      p["error"] = error;
    std::cout << p.dump() << std::endl;
  }
}

// Training the larger model at T = 2048 in float32, then (on CUDA) with train.bf16_autocast; on
// CUDA each with the training pass as a CUDA graph, then without.
// --profile PREFIX: one more step of each under the profiler, saved as PREFIX-<dtype>[-graph].json.
void bench_train(int64_t batch, int64_t steps, const std::string& profile, bool fused_memory,
                 int64_t chunk_scan, const std::string& dtype, const std::string& graphs) {
  const bool can_graph = device.is_cuda() && GraphedTrainPass::capture_available();
  for (const bool bf16 : {false, true})
    for (const bool graph : {true, false}) {
      if (dtype == "all" ? bf16 && !device.is_cuda() : bf16 != (dtype == "bf16")) continue;
      if (graph ? !can_graph || graphs == "off" : can_graph && graphs == "on") continue;
      bench_train_once(batch, steps, profile, fused_memory, chunk_scan, bf16, graph);
    }
}
// demo-mqar-titans's own training step, module norms off (the eager step computes none).
void bench_train_demo(const std::string& preset, int64_t steps, const std::vector<std::string>& sets,
                      int64_t op_times) {
  std::vector<std::string> overrides{"train.module_norms=false"};
  overrides.insert(overrides.end(), sets.begin(), sets.end());
  Trainer trainer(load_preset(preset, overrides));
  const double seconds = median_step_seconds(trainer, steps);
  const Batch batch = trainer.training_batch(1);
  const double tokens = static_cast<double>(batch.tokens.numel());
  const AtenCalls calls =
      aten_calls([&] { trainer.train_step(); });  // one more step's (eager_lm_train.py --count-aten)
  auto j = line("train/" + preset);
  // The FLOP count is the MLP dual form's (Titans' rule at c = 1); Atlas's Muon form, with a
  // window and Newton–Schulz per token, has none here, and its line reports no GFLOP/s.
  const MemoryRule& rule = trainer.preset().memory;
  if (rule.structure == Structure::Mlp && rule.optimiser == Optimiser::GdMomentum && rule.window == 1) {
    const double per_token = mlp_training_flops_per_token(trainer, trainer.preset().train.chunk);
    j.update({{"flops_per_token", per_token},
              {"gflops", per_token * tokens / seconds / 1e9},
              {"sgemm_peak_gflops", sgemm_peak(3)}});
  }
  j.update({{"batch", batch.tokens.size(0)},
            {"seq_len", batch.tokens.size(1)},
            {"step_ms", 1e3 * seconds},
            {"tokens_per_s", tokens / seconds},
            {"median_of", steps},
            {"aten_calls", calls.top_level},
            {"aten_calls_nested", calls.all},
            {"sets", sets}});
  if (op_times > 0) {
    // One more step with every operator timed (aten_op_times.h): where the step's time goes.
    nlohmann::json ops = nlohmann::json::array();
    for (const OpTime& t : aten_op_times([&] { trainer.train_step(); }, static_cast<size_t>(op_times)))
      ops.push_back({{"op", t.name}, {"self_ms", t.self_ms}, {"calls", t.calls}});
    j["op_times"] = ops;
  }
  std::cout << j.dump() << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  keep_large_blocks_in_heap();  // model/util/allocator.h
  install_small_block_cache();  // model/util/small_block_cache.h
  int64_t tokens = 2048, reps = 5, train_batch = 8, train_steps = 5;
  std::string only, device_name = "auto";
  memscope::bench::BenchFlags flags("device_bench");
  flags.add("--tokens", tokens).add("--reps", reps).add("--only", only).add("--device", device_name);
  flags.add("--train-batch", train_batch).add("--train-steps", train_steps);
  std::vector<std::string> train_sets;
  flags.add("--train-set", train_sets);
  int64_t op_times = 0;
  flags.add("--op-times", op_times);
  std::string train_preset = "demo-mqar-hope";
  flags.add("--train-preset", train_preset);
  std::string profile;
  int64_t fused_memory = 1, chunk_scan = -1;
  std::string dtype = "all", graphs = "all";
  flags.add("--profile", profile).add("--fused-memory", fused_memory).add("--chunk-scan", chunk_scan);
  flags.add("--dtype", dtype).add("--graph", graphs);
  int64_t fla_tokens = 8192, fla_heads = 96;
  flags.add("--fla-tokens", fla_tokens).add("--fla-heads", fla_heads);
  if (!flags.parse(argc, argv)) return 2;
  if (dtype != "all" && dtype != "float32" && dtype != "bf16") {
    std::cerr << "device_bench: --dtype must be all, float32 or bf16, not '" << dtype << "'\n";
    return 2;
  }
  if (graphs != "all" && graphs != "on" && graphs != "off") {
    std::cerr << "device_bench: --graph must be all, on or off, not '" << graphs << "'\n";
    return 2;
  }
  device = pick_device(device_name);
  set_default_device(device);
  if (device.is_cpu()) set_compute_threads(1);  // as the eager side runs (ATen and OpenBLAS)
  {
    torch::NoGradGuard no_grad;  // stepping, as the debugger does
    if (only.empty() || only == "layer") bench_layer(tokens, reps);
    if (only.empty() || only == "chunkwise") bench_chunkwise(tokens, reps);
    if (only == "fla-shape") bench_fla_shape(fla_tokens, fla_heads, reps);
    if (only.empty() || only == "model") {
      bench_model("demo-mqar", load_preset("demo-mqar"), tokens, reps);
      bench_model("demo-mqar-titans", load_preset("demo-mqar-titans"), tokens, reps);  // eager_lm.py's model
      bench_model("large", load_preset("demo-mqar-titans", large_model_sets()),
                  std::max<int64_t>(tokens / 2, 128), reps);
    }
  }
  if (only.empty() || only == "train")
    bench_train(train_batch, train_steps, profile, fused_memory != 0, chunk_scan, dtype, graphs);
  if (only == "train-demo") bench_train_demo("demo-mqar-titans", train_steps, train_sets, op_times);
  if (only == "train-demo-mlp") bench_train_demo("demo-mqar-titans-mlp", train_steps, train_sets, op_times);
  if (only == "train-preset") bench_train_demo(train_preset, train_steps, train_sets, op_times);
  return 0;
}
