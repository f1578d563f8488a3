// Where a probed inspect step's time goes (issue 20's "say where the remaining time goes"):
// probe_overhead measures the whole engine step with and without probes; this splits a probed
// step into its parts, each timed per token over the same token stream, stepped as the engine
// steps it (batch 1, one token at a time, one thread), in three runs of the stream:
//   step_us           1. unprobed: the model step without a record, steps back to back
//   probed_step_us    2. probed, in the engine's order (step with its record, RecordLater as the
//                        engine asks, score, probes, detectors, next step): the step, so
//                        probed_step_us - step_us is what the record and the probes' footprint in
//                        the caches add to it
//   extras_us            the token's argmax and scored loss over the vocabulary (score_token)
//   collect_us           collect_probes without snapshots, after finish_record (the loss after
//                        the write that a general step's record leaves to the probes)
//   snapshots_us         what collect adds on a snapshot step (probe.matrices_every)
//   detectors_us         Detectors::observe on the frame
//   record_us         3. parts alone: what asking for the engine's record (RecordLater) adds to
//                        the step, the two steps of each token taken one right after the other,
//                        in turns first
//   extras_aten_us       the token's score as ATen calls (argmax; log_softmax in double), for the ratio
//   spectra_us           the batched singular values (erank, NS spectra; a hope block's self-modifying
//                        memories' M), in one call (singular_values_together; a snapshot frame takes
//                        HOPE's in groups, show_host_matrices); spectra_gflops their Gram matrices' and
//                        reductions' FLOP over that time, against sgemm_peak_gflops (sgemm_peak.h)
//   spectra_lapack_us    the same stacks through at::linalg_svdvals (LAPACK), for the ratio
// One JSON line; medians over repetitions of the stream. Flags: --preset P (demo-mqar),
// --tokens T per repetition (256), --reps R (5), --threads T (1), --op-times N: the N ATen operators
// with the most self time in the last repetition's collects (aten_op_times.h), per step, for snapshot
// steps and the others apart (collect_op_times, snapshot_op_times).
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/aten_op_times.h"
#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "bench/sgemm_peak.h"
#include "bench/token_stream.h"
#include "model/config/preset.h"
#include "model/probe/detectors.h"
#include "model/probe/probe_collector.h"
#include "model/probe/shown_matrices.h"
#include "model/probe/small_singular_values.h"
#include "model/probe/token_score.h"
#include "model/train/trainer.h"
#include "model/util/allocator.h"
#include "model/util/compute_threads.h"
#include "model/util/small_block_cache.h"

using namespace memscope::model;

namespace {

using Clock = std::chrono::steady_clock;
double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// The stacks of matrices collect_fused_probes hands to small_singular_values, one per weight (M;
// W1 and W2 of an MLP memory): every head's weight, then (Muon) every head's U = NS(S) from the
// record, batch row 0.
std::vector<at::Tensor> spectra_stacks(const LmState& state, const LmStepOutput& out) {
  std::vector<at::Tensor> stacks;
  if (state.blocks.empty()) return stacks;
  for (size_t w = 0; w < state.blocks.front().memory.memory.size(); ++w) {
    std::vector<at::Tensor> parts;
    for (const auto& block : state.blocks) parts.push_back(block.memory.memory[w].select(0, 0));
    for (const auto& record : out.records)
      if (record && record->ns_output.size() > w) parts.push_back(record->ns_output[w].select(0, 0));
    stacks.push_back(at::cat(parts, 0).contiguous());
  }
  // A hope block's self-modifying memories: per weight (W1, W2), every block's five, as a snapshot
  // frame measures them (M; its ΔM are as many again).
  for (size_t w = 0; w < 2; ++w) {
    std::vector<at::Tensor> parts;
    for (const auto& block : state.blocks)
      for (const auto& memory : block.selfmod.weights)
        if (memory.size() > w) parts.push_back(memory[w].select(0, 0));
    if (!parts.empty()) stacks.push_back(at::cat(parts, 0).contiguous());
  }
  return stacks;
}

}  // namespace

int main(int argc, char** argv) {
  keep_large_blocks_in_heap();   // model/util/allocator.h: as the app runs
  install_small_block_cache();   // model/util/small_block_cache.h
  std::string preset_name = "demo-mqar";
  int64_t tokens = 256, reps = 5;
  int threads = 1;
  int64_t op_times = 0;
  memscope::bench::BenchFlags flags("probe_breakdown");
  flags.add("--preset", preset_name).add("--tokens", tokens).add("--reps", reps).add("--threads", threads);
  flags.add("--op-times", op_times);
  if (!flags.parse(argc, argv)) return 2;
  set_compute_threads(threads);
  at::NoGradGuard no_grad;

  const Preset preset = load_preset(preset_name);
  Trainer trainer(preset);
  const LanguageModel& model = trainer.model();
  const ProbeConfig& probe = preset.probe;
  const auto [stream, sequence_length] = memscope::bench::token_stream(trainer, tokens);

  enum Part {
    Step, ProbedStep, StepRecord, Extras, ExtrasAten, Collect, Spectra, SpectraLapack, CollectSnapshots,
    DetectorsPart, kParts
  };
  std::vector<std::vector<double>> per_rep(kParts);
  int64_t snapshot_steps = 0;
  double spectra_flop = 0;  // one token's spectra_stacks
  // --op-times: ATen's share of the last rep's collects, snapshot steps and the others apart.
  std::map<std::string, memscope::bench::OpTime> snapshot_ops, collect_ops;
  const auto token = [&](int64_t i) { return stream[static_cast<size_t>(i)]; };
  const auto fresh = [&](int64_t i, LmState& state) {
    if (i % sequence_length == 0) state = model->initial_state(1);
  };
  for (int64_t r = 0; r < reps; ++r) {
    std::vector<double> total(kParts, 0.0);
    int64_t plain = 0, snapshots = 0;
    // 1. The unprobed run: nothing between one step and the next.
    LmState state;
    for (int64_t i = 0; i < tokens; ++i) {
      fresh(i, state);
      const auto start = Clock::now();
      model->step(token(i), state, 1, StepDetail::OutputOnly);
      total[Step] += micros_since(start);
    }
    // 2. The probed run in the engine's order on one thread: the step with its record, the
    //    token's score, the probes, the detectors, then the next token's step. Its step against
    //    the unprobed run's is what the record and the probes' footprint in the caches cost.
    Detectors detectors(preset.detect);
    for (int64_t i = 0; i < tokens; ++i) {
      fresh(i, state);
      std::vector<std::vector<at::Tensor>>
          before;  // as the engine's: a hope block's self-modifying weights too
      for (const auto& b : state.blocks) {
        std::vector<at::Tensor> weights = b.memory.memory;
        for (const auto& w : b.selfmod.weights) weights.insert(weights.end(), w.begin(), w.end());
        before.push_back(std::move(weights));
      }
      auto start = Clock::now();
      LmStepOutput out = model->step(token(i), state, 1, StepDetail::RecordLater);  // as the engine
      total[ProbedStep] += micros_since(start);
      start = Clock::now();
      ProbeInputs in;
      in.model = &model;
      in.state = &state;
      in.memory_before = &before;
      in.records = &out.records;
      in.matrices = probe.matrices_every > 0 && i % probe.matrices_every == 0;
      Frame frame;
      frame.step = i + 1;
      frame.kind = FrameKind::Inspect;
      frame.token_index = i % sequence_length;
      const at::Tensor logits = out.logits[0];
      score_token(logits, 0);  // as the engine scores a CPU model's token
      total[Extras] += micros_since(start);
      start = Clock::now();
      for (size_t l = 0; l < out.records.size(); ++l)
        if (out.records[l]) finish_record(*out.records[l], state.blocks[l].memory.memory);
      if (op_times > 0 && r == reps - 1) {
        auto& ops = in.matrices ? snapshot_ops : collect_ops;
        for (const auto& t :
             memscope::bench::aten_op_times([&] { collect_probes(frame, in, probe); }, op_times)) {
          ops[t.name].self_ms += t.self_ms;
          ops[t.name].calls += t.calls;
        }
      } else {
        collect_probes(frame, in, probe);
      }
      (in.matrices ? total[CollectSnapshots] : total[Collect]) += micros_since(start);
      (in.matrices ? snapshots : plain) += 1;
      start = Clock::now();
      detectors.observe(frame);
      total[DetectorsPart] += micros_since(start);
    }
    // 3. Parts timed alone, each against what it replaced: the record step against the unprobed
    //    step of the same token, the spectra against LAPACK, the token's score against the ATen
    //    calls.
    LmState unprobed, probed;
    for (int64_t i = 0; i < tokens; ++i) {
      fresh(i, unprobed);
      fresh(i, probed);
      // Which of the two goes first alternates: the second finds the first's caches warm.
      double output_only = 0, recorded = 0;
      LmStepOutput out;
      for (int order = 0; order < 2; ++order) {
        const auto start = Clock::now();
        if ((order + i) % 2 == 0) {
          model->step(token(i), unprobed, 1, StepDetail::OutputOnly);
          output_only = micros_since(start);
        } else {
          out = model->step(token(i), probed, 1, StepDetail::RecordLater);  // as the engine
          recorded = micros_since(start);
        }
      }
      total[StepRecord] += recorded - output_only;
      auto start = Clock::now();
      const at::Tensor logits = out.logits[0];
      (-at::log_softmax(logits.to(at::kDouble), 0)[0]).item<double>();  // the four ATen calls it replaced,
      logits.argmax().item<int64_t>();                                  // each read back as the probes' transfer did
      total[ExtrasAten] += micros_since(start);
      {
        const std::vector<at::Tensor> stacks = spectra_stacks(probed, out);
        if (spectra_flop == 0)
          for (const auto& stack : stacks) {
            // The Gram matrix of the shorter side (its lower triangle) and its reduction to
            // tridiagonal form; the QL iterations' O(m²) a matrix left out.
            const double m = static_cast<double>(std::min(stack.size(1), stack.size(2)));
            const double n = static_cast<double>(std::max(stack.size(1), stack.size(2)));
            spectra_flop += static_cast<double>(stack.size(0)) * (m * (m + 1) * n + 4.0 / 3.0 * m * m * m);
          }
        start = Clock::now();
        singular_values_together(stacks);  // one call where the shapes agree
        total[Spectra] += micros_since(start);
        start = Clock::now();
        for (const auto& stack : stacks) at::linalg_svdvals(stack);
        total[SpectraLapack] += micros_since(start);
      }
    }
    const double n = static_cast<double>(tokens);
    for (Part part : {Step, ProbedStep, StepRecord, Extras, ExtrasAten, Spectra, SpectraLapack, DetectorsPart})
      per_rep[part].push_back(total[part] / n);
    per_rep[Collect].push_back(total[Collect] / static_cast<double>(std::max<int64_t>(plain, 1)));
    per_rep[CollectSnapshots].push_back(
        snapshots > 0 ? total[CollectSnapshots] / static_cast<double>(snapshots) - per_rep[Collect].back() : 0.0);
    snapshot_steps = snapshots;
  }
  using memscope::bench::median;
  // Per step of its kind, largest self time first.
  const auto op_list = [&](const std::map<std::string, memscope::bench::OpTime>& ops, int64_t steps) {
    std::vector<memscope::bench::OpTime> sorted;
    for (const auto& [name, t] : ops) sorted.push_back({name, t.self_ms, t.calls});
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.self_ms > b.self_ms; });
    nlohmann::json list = nlohmann::json::array();
    steps = std::max<int64_t>(steps, 1);
    for (size_t i = 0; i < sorted.size() && i < static_cast<size_t>(op_times); ++i)
      list.push_back({{"op", sorted[i].name},
                      {"us", 1000 * sorted[i].self_ms / static_cast<double>(steps)},
                      {"calls", static_cast<double>(sorted[i].calls) / static_cast<double>(steps)}});
    return list;
  };
  std::cout << nlohmann::json{{"bench", "probe_breakdown"},
                              {"preset", preset_name},
                              {"tokens", tokens},
                              {"reps", reps},
                              {"threads", threads},
                              {"snapshot_steps_per_rep", snapshot_steps},
                              {"step_us", median(per_rep[Step])},
                              {"probed_step_us", median(per_rep[ProbedStep])},
                              {"record_us", median(per_rep[StepRecord])},
                              {"extras_us", median(per_rep[Extras])},
                              {"extras_aten_us", median(per_rep[ExtrasAten])},
                              {"collect_us", median(per_rep[Collect])},
                              {"spectra_us", median(per_rep[Spectra])},
                              {"spectra_lapack_us", median(per_rep[SpectraLapack])},
                              {"spectra_gflops",
                               spectra_flop > 0 ? spectra_flop / median(per_rep[Spectra]) / 1e3 : 0.0},
                              {"sgemm_peak_gflops", memscope::bench::sgemm_peak(5)},
                              {"snapshots_us", median(per_rep[CollectSnapshots])},
                              {"detectors_us", median(per_rep[DetectorsPart])},
                              {"collect_op_times", op_list(collect_ops, tokens - snapshot_steps)},
                              {"snapshot_op_times", op_list(snapshot_ops, snapshot_steps)}}
                   .dump()
            << std::endl;
  return 0;
}
