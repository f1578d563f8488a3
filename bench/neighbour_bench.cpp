// What a busy second core costs the model step (issue 20's probe overlap). With engine.overlap one
// thread steps the next inspect token while the other measures this token's probes, so the step
// beside the probes is the floor of a probed token; this measures how much slower that step is
// when the other core is busy, and with what:
//   idle        the other thread sleeps (the one-thread step the "probes off" run times)
//   spin_pause  it spins with the pause instruction, as SideThread waits for a hand-over
//   alu         it runs register-only integer arithmetic: no memory, no sharing
//   stream      it streams through a buffer larger than the shared L3
//   step        it steps the same model on a state of its own (same weights, own allocations)
//   step_copy   it steps a copy of the model (weights of its own: no tensor shared with this thread)
//   probes      it measures one probed token's probes over and over (collect_probes with the
//               token's argmax and loss, and the detectors): about the other thread's work in
//               an overlapped run
// Each kind is timed over the same token stream, interleaved (idle, spin_pause, …, idle, …), medians
// over repetitions. One JSON line per kind: µs per token and the slowdown against idle in percent.
// Flags: --preset P (demo-mqar), --tokens T per repetition (256), --reps R (7), --record 0|1
// (1: the probed step, with its record), --only KIND (repeatable: idle and these).
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "bench/token_stream.h"
#include "model/config/preset.h"
#include "model/probe/detectors.h"
#include "model/probe/probe_collector.h"
#include "model/probe/token_score.h"
#include "model/train/trainer.h"
#include "model/util/allocator.h"
#include "model/util/compute_threads.h"
#include "model/util/cpu_relax.h"
#include "model/util/small_block_cache.h"

using namespace memscope::model;

namespace {

using Clock = std::chrono::steady_clock;

enum class Neighbour { Idle, SpinPause, Alu, Stream, Step, StepCopy, Probes };
constexpr const char* kNames[] = {"idle", "spin_pause", "alu", "stream", "step", "step_copy", "probes"};

// The other core's work until `stop`: one kind of neighbour.
void neighbour(Neighbour kind, const std::atomic<bool>& stop, const Preset& preset, const LanguageModel& model, const LanguageModel& copy,
               const std::vector<at::Tensor>& stream, int64_t sequence_length, StepDetail detail) {
  set_compute_threads(1);
  at::NoGradGuard no_grad;
  switch (kind) {
    case Neighbour::Idle:
      while (!stop.load(std::memory_order_relaxed)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      break;
    case Neighbour::SpinPause:
      while (!stop.load(std::memory_order_relaxed)) cpu_relax();
      break;
    case Neighbour::Alu: {
      uint64_t x = 88172645463325252ull;
      while (!stop.load(std::memory_order_relaxed))
        for (int i = 0; i < 1000; ++i) x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift: registers only
      volatile uint64_t sink = x;
      (void)sink;
      break;
    }
    case Neighbour::Stream: {
      std::vector<float> buffer(64u << 20);  // 256 MiB, well past the L3
      float sum = 0;
      while (!stop.load(std::memory_order_relaxed))
        for (size_t i = 0; i < buffer.size(); i += 16) sum += buffer[i]++;
      volatile float sink = sum;
      (void)sink;
      break;
    }
    case Neighbour::Step:
    case Neighbour::StepCopy: {
      const LanguageModel& m = kind == Neighbour::Step ? model : copy;
      LmState state = m->initial_state(1);
      for (size_t i = 0; !stop.load(std::memory_order_relaxed); i = (i + 1) % stream.size()) {
        if (static_cast<int64_t>(i) % sequence_length == 0) state = m->initial_state(1);
        m->step(stream[i], state, 1, detail);
      }
      break;
    }
    case Neighbour::Probes: {
      LmState state = model->initial_state(1);
      for (int64_t i = 0; i < sequence_length / 2; ++i) model->step(stream[static_cast<size_t>(i)], state, 1, detail);
      std::vector<std::vector<at::Tensor>> before;
      for (const auto& b : state.blocks) before.push_back(b.memory.memory);
      const LmStepOutput out = model->step(stream[static_cast<size_t>(sequence_length / 2)], state, 1, StepDetail::Record);
      Detectors detectors(preset.detect);
      for (int64_t step = 1; !stop.load(std::memory_order_relaxed); ++step) {
        ProbeInputs in;
        in.model = &model;
        in.state = &state;
        in.memory_before = &before;
        in.records = &out.records;
        in.matrices = preset.probe.matrices_every > 0 && step % preset.probe.matrices_every == 0;
        score_token(out.logits[0], 0);  // as the engine scores a CPU model's token
        Frame frame;
        frame.step = step;
        frame.kind = FrameKind::Inspect;
        frame.token_index = sequence_length / 2;
        collect_probes(frame, in, preset.probe);
        detectors.observe(frame);
      }
      break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  keep_large_blocks_in_heap();  // model/util/allocator.h: as the app runs
  install_small_block_cache();  // model/util/small_block_cache.h
  std::string preset_name = "demo-mqar";
  int64_t tokens = 256, reps = 7, record = 0;
  std::vector<std::string> only;
  memscope::bench::BenchFlags flags("neighbour_bench");
  flags.add("--preset", preset_name).add("--tokens", tokens).add("--reps", reps).add("--record", record).add("--only", only);
  if (!flags.parse(argc, argv)) return 2;
  set_compute_threads(1);
  at::NoGradGuard no_grad;
  const StepDetail detail = record ? StepDetail::Record : StepDetail::OutputOnly;

  const Preset preset = load_preset(preset_name);
  Trainer trainer(preset);
  const LanguageModel& model = trainer.model();
  Trainer copy_trainer(preset);  // the same seed: equal weights in tensors of their own
  const LanguageModel& copy = copy_trainer.model();
  const auto [stream, sequence_length] = memscope::bench::token_stream(trainer, tokens);

  std::vector<Neighbour> kinds{Neighbour::Idle};  // first: the others are timed against it
  for (int k = 1; k <= static_cast<int>(Neighbour::Probes); ++k)
    if (only.empty() || std::find(only.begin(), only.end(), kNames[k]) != only.end()) kinds.push_back(static_cast<Neighbour>(k));
  std::vector<std::vector<double>> us(kinds.size());
  for (int64_t r = 0; r < reps; ++r) {
    for (size_t k = 0; k < kinds.size(); ++k) {
      std::atomic<bool> stop{false};
      std::thread other(neighbour, kinds[k], std::cref(stop), std::cref(preset), std::cref(model), std::cref(copy), std::cref(stream), sequence_length, detail);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the neighbour is running
      LmState state = model->initial_state(1);
      const auto start = Clock::now();
      for (int64_t i = 0; i < tokens; ++i) {
        if (i % sequence_length == 0) state = model->initial_state(1);
        model->step(stream[static_cast<size_t>(i)], state, 1, detail);
      }
      us[k].push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / static_cast<double>(tokens));
      stop = true;
      other.join();
    }
  }
  using memscope::bench::median;
  const double idle = median(us[0]);
  for (size_t k = 0; k < kinds.size(); ++k)
    std::cout << nlohmann::json{{"bench", "neighbour_bench"},
                                {"preset", preset_name},
                                {"record", record != 0},
                                {"neighbour", kNames[static_cast<int>(kinds[k])]},
                                {"tokens", tokens},
                                {"reps", reps},
                                {"step_us", median(us[k])},
                                {"slowdown_pct", 100.0 * (median(us[k]) / idle - 1.0)}}
                     .dump()
              << std::endl;
  return 0;
}
