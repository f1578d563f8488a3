// Probe overhead (issues 5 and 18): engine step throughput with probes off, at the default cadence,
// and with every probe (and every matrix snapshot) at every step, on the same model in the same run.
// Training also measures the per-module outer probes alone (train.module_norms; "off" has them off
// too); inspect also measures stepping into a training batch (engine.inspect_batch: the sequential
// step in the trainer's chunk form plus one backward through the inner loop per row).
// One JSON line per configuration with tokens/s and the overhead against probes off, in percent:
// the median (and quartiles) over repetitions of each repetition's time against that repetition's
// "off" time. Repetitions are interleaved (off, default, all, off, …) so machine noise hits them alike.
// minor_faults_per_1000_steps: page faults (every thread) in the timed steps, per 1000 steps;
// resident_kb_per_step and ring_kb_per_step: how much the process's resident memory and the
// timeline's frame ring grew per step (bench_timing.h's resident_bytes: first touches are dear).
// Flags: --preset P (demo-mqar), --mode inspect|train, --steps N per repetition, --reps R,
// --threads T, --set K=V (repeatable), --only NAME (repeatable: just these configurations, with
// "off" always first; for profiling one of them).
// --forks N: each configuration runs N more timelines forked from its first, every step advancing
// them all as the engine steps a run with forks (tokens/s counts every timeline's tokens).
// engine.overlap (on by default) measures the probes on a second thread while the engine thread
// steps the next inspect token (SideJob::Probes, model/engine/branch.h), or the other way round
// (SideJob::NextToken: with forks, and in default_next_token_aside): wall time
// then hides much of the probes, CPU time (cpu_overhead_pct, both threads) does not.
// default_probes_aside keeps SideJob::Probes with forks too, so that the tokens are stepped further
// there (the same as default on one timeline).
// side_spin_slowdown_pct and side_busy_slowdown_pct: how much a second thread spinning, or
// computing, slowed this one, measured after each repetition (bench/core_sharing.h), median: about
// 0 where the VM's two vCPUs were two cores, 75-100 where they shared one; side_round_trip_ns, a
// number's trip to the other thread and back (two cache lines crossing), median. The overlapped
// probes' overhead reads very differently between the two (README "The two vCPUs, shared or not").
// --busy-threads N: N more threads spin through the repetitions, as other programs on a busy
// machine would; overlap_back_offs and tokens_probed_in_line: how often the engine found the
// overlap not paying and measured the probes in line instead (model/engine/overlap_gauge.h).
// tokens_stepped_ahead: the first timeline's inspect tokens taken that had been stepped ahead of
// their turn, over the whole run (warm-up included); tokens_stepped_further, of those, the ones
// stepped while a snapshot frame's probes ran aside (Branch::step_further; default_no_further: none).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "bench/core_sharing.h"
#include "model/config/preset.h"
#include "model/data/task.h"
#include "model/engine/branch.h"
#include "model/util/allocator.h"
#include "model/util/compute_threads.h"
#include "model/util/small_block_cache.h"

using namespace memscope::model;

namespace {

using memscope::bench::median;
using memscope::bench::minor_faults;
using memscope::bench::process_cpu_seconds;
using memscope::bench::resident_bytes;

struct Config {
  const char* name;
  std::vector<std::string> sets;
  std::optional<SideJob> side_job;  // every timeline's side thread does this job (else as the engine has it)
  StepFurther further = StepFurther::WhileProbesRun;
};

}  // namespace

int main(int argc, char** argv) {
  keep_large_blocks_in_heap();  // model/util/allocator.h: as the app runs
  install_small_block_cache();  // model/util/small_block_cache.h
  std::string preset = "demo-mqar", mode = "inspect";
  int64_t steps = 64, reps = 5;
  int threads = 1;
  int64_t forks = 0, busy_threads = 0;
  std::vector<std::string> sets, only;
  memscope::bench::BenchFlags flags("probe_overhead");
  flags.add("--preset", preset).add("--mode", mode).add("--steps", steps).add("--reps", reps);
  flags.add("--threads", threads).add("--set", sets).add("--only", only).add("--forks", forks);
  flags.add("--busy-threads", busy_threads);
  if (!flags.parse(argc, argv)) return 2;
  memscope::model::set_compute_threads(threads);  // ATen and OpenBLAS
  std::vector<Config> configs{
      {"off", {"probe.every=0", "train.module_norms=false"}},
      {"default", {}},  // probe.every, probe.matrices_every and train.module_norms as the preset has them
      // The same with the side thread stepping the next token while the engine thread measures the
      // probes (SideJob::NextToken), which the engine does only with forks.
      {"default_next_token_aside", {}, SideJob::NextToken},
      // The same with the side thread measuring the probes while the engine thread steps (and
      // steps further), which the engine does only on one timeline: differs only with --forks.
      {"default_probes_aside", {}, SideJob::Probes},
      // The same without the tokens stepped further while a snapshot frame's probes run
      // (Branch::step_further): the engine thread waits for them, helping with their shared loops.
      {"default_no_further", {}, std::nullopt, StepFurther::Off},
      // The same on the engine thread alone: the next token is not stepped while the probes run.
      {"default_no_overlap", {"engine.overlap=false"}},
      {"all", {"probe.every=1", "probe.matrices_every=1"}},
      {"all_full_matrices", {"probe.every=1", "probe.matrices_every=1", "probe.full_matrices=true"}},
  };
  if (mode == "train") configs.push_back({"module_norms_only", {"probe.every=0", "train.module_norms=true"}});
  else configs.push_back({"step_into_batch", {"engine.inspect_batch=1"}});
  if (!only.empty())
    configs.erase(std::remove_if(configs.begin() + 1, configs.end(),
                                 [&](const Config& c) { return std::find(only.begin(), only.end(), c.name) == only.end(); }),
                  configs.end());
  std::vector<std::vector<std::unique_ptr<Branch>>> timelines(configs.size());  // per configuration
  std::vector<Event> events;
  for (size_t c = 0; c < configs.size(); ++c) {
    std::vector<std::string> all = sets;
    all.push_back("engine.mode=" + mode);
    all.push_back("engine.keyframe_every=0");  // measure the probes, not the keyframes
    all.insert(all.end(), configs[c].sets.begin(), configs[c].sets.end());
    timelines[c].push_back(std::make_unique<Branch>(0, load_preset(preset, all)));
    for (int64_t f = 1; f <= forks; ++f) timelines[c].push_back(timelines[c][0]->fork(static_cast<int>(f), 0, {}, events, {}));
    for (auto& b : timelines[c]) {  // as the engine has it, or the configuration's side job
      b->set_side_job(configs[c].side_job.value_or(side_job_for(timelines[c].size())));
      b->set_step_further(configs[c].further);
    }
  }
  std::vector<std::vector<double>> seconds(configs.size()), cpu(configs.size());
  std::vector<int64_t> faults(configs.size(), 0);
  std::vector<double> resident_growth(configs.size(), 0), ring_growth(configs.size(), 0);
  for (auto& t : timelines)
    for (auto& b : t) b->advance(events);  // warm-up: allocations, first sequence
  memscope::bench::CoreSharing core_sharing;
  memscope::bench::BusyThreads busy(static_cast<int>(busy_threads));
  std::vector<double> spin_ratios, busy_ratios, round_trips;
  for (int64_t r = 0; r < reps; ++r) {
    const memscope::bench::CoreSharing::Round sharing = core_sharing.measure();
    spin_ratios.push_back(sharing.spin_ratio);
    busy_ratios.push_back(sharing.busy_ratio);
    round_trips.push_back(sharing.round_trip_ns);
    for (size_t c = 0; c < configs.size(); ++c) {
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = process_cpu_seconds();
      const int64_t faults_start = minor_faults();
      const double resident_start = resident_bytes();
      const auto ring_start = timelines[c][0]->ring()->bytes();
      for (int64_t s = 0; s < steps; ++s)
        for (auto& b : timelines[c]) b->advance(events);
      faults[c] += minor_faults() - faults_start;
      resident_growth[c] += resident_bytes() - resident_start;
      ring_growth[c] += static_cast<double>(timelines[c][0]->ring()->bytes() - ring_start);
      seconds[c].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      cpu[c].push_back(process_cpu_seconds() - cpu_start);
    }
  }
  // Each repetition's time against the same repetition's "off" run, then the median and quartiles
  // of those ratios: a slow drift of the machine (these VMs swing by 10-20% over seconds) moves
  // both halves of a pair alike.
  auto ratio_quantile = [&](const std::vector<std::vector<double>>& x, size_t c, double q) {
    std::vector<double> ratios;
    for (size_t r = 0; r < x[c].size(); ++r) ratios.push_back(x[c][r] / x[0][r]);
    std::sort(ratios.begin(), ratios.end());
    return ratios[static_cast<size_t>(q * static_cast<double>(ratios.size() - 1) + 0.5)];
  };
  const Preset p = load_preset(preset, sets);
  // A training step trains batch × seq_len tokens; an inspect step steps one.
  const double per_step = mode == "train" ? static_cast<double>(p.train.batch * make_task(p.task)->seq_len()) : 1.0;
  for (size_t c = 0; c < configs.size(); ++c) {
    const double t = median(seconds[c]);
    const double tokens = static_cast<double>(steps * (1 + forks)) * per_step;
    std::cout << nlohmann::json{{"bench", "probe_overhead"},
                                {"preset", preset},
                                {"mode", mode},
                                {"probes", configs[c].name},
                                {"steps", steps},
                                {"reps", reps},
                                {"threads", threads},
                                {"forks", forks},
                                {"steps_per_s", static_cast<double>(steps) / t},
                                {"tokens_per_s", tokens / t},
                                {"overhead_pct", 100.0 * (ratio_quantile(seconds, c, 0.5) - 1.0)},
                                {"overhead_q1_pct", 100.0 * (ratio_quantile(seconds, c, 0.25) - 1.0)},
                                {"overhead_q3_pct", 100.0 * (ratio_quantile(seconds, c, 0.75) - 1.0)},
                                {"cpu_overhead_pct", 100.0 * (ratio_quantile(cpu, c, 0.5) - 1.0)},
                                {"resident_kb_per_step",
                                 resident_growth[c] / 1024.0 / static_cast<double>(reps * steps)},
                                {"ring_kb_per_step",
                                 ring_growth[c] / 1024.0 / static_cast<double>(reps * steps)},
                                {"side_spin_slowdown_pct", 100.0 * (median(spin_ratios) - 1.0)},
                                {"side_busy_slowdown_pct", 100.0 * (median(busy_ratios) - 1.0)},
                                {"side_round_trip_ns", median(round_trips)},
                                {"busy_threads", busy_threads},
                                {"overlap_back_offs", timelines[c][0]->overlap_gauge().back_offs()},
                                {"tokens_probed_in_line", timelines[c][0]->overlap_gauge().tokens_in_line()},
                                {"tokens_stepped_ahead", timelines[c][0]->tokens_stepped_ahead()},
                                {"tokens_stepped_further", timelines[c][0]->tokens_stepped_further()},
                                {"minor_faults_per_1000_steps",
                                 1000.0 * static_cast<double>(faults[c]) / static_cast<double>(reps * steps)}}
                     .dump()
              << std::endl;
  }
  return 0;
}
