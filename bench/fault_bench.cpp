// Detector recall on planted faults (issue 19): one run of a preset (inspect, or train with
// --mode train) with a fault planted
// every --every steps, at varying places in the sequence, and the detectors' events matched to it.
// A fault is found when a detector of the expected kind fires within --window steps after it, and
// found at the right step when the first such event is on the very next step. Events outside every
// window are false positives (per 10,000 steps). A state fault (NaN, momentum) whose first step
// starts a new sequence is wiped by the reset to M_0 unread: counted as wiped, not planted. Faults, applied between steps as commands:
//   nan_memory   NaN into layer 0's memory (all heads)            → nonfinite
//   nan_gate     layer 0 head 1's lr gate reads NaN for one step    → nonfinite
//   lr_spike     memory.lr.max × 100 for 3 steps, then restored    → spike, norm_growth or nonfinite
//   ns_degraded  memory.ns.steps = 1 for 3 steps, then restored   → ns_error (Muon presets only)
//   momentum_blowup  layer 0's momentum S × 100 (all heads)        → spike or norm_growth
//                    (rules with a momentum buffer only)
// and in train mode, watched through the training loss and gradient norm:
//   corrupt_batch  one training batch of random tokens and targets  → spike
//   train_lr_spike train.lr × 30 for one step, then restored         → spike or nonfinite
// One JSON line per fault kind, one for all kinds together and one for the run. Flags: --preset P
// (demo-mqar), --trials N per kind, --every N, --window W, --warmup N, --threads T, --mode
// inspect|train, --ckpt FILE (start from a trained run), --set K=V (repeatable), --list 1 (also one
// JSON line per planted fault with its token, the step its first expected event fired (-1: none)
// and the messages of the events at its next step: run with a low detect.spike_threshold to see the
// z-scores a fault reaches), --dump FILE (CSV of the series the detectors watch: per inspect frame,
// layer and head, ‖M‖, ‖S‖ and the NS error and σ range of the first weight; per training frame, the loss, the gradient norm
// and the largest and median module update-to-weight ratio;
// and the planted faults: to try a detector statistic offline; --trials 0 --warmup N gives a
// healthy run).
#include <torch/torch.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <fstream>
#include <set>

#include "bench/bench_flags.h"
#include "model/util/compute_threads.h"
#include "model/config/knobs.h"
#include "model/config/preset.h"
#include "model/engine/branch.h"
#include "model/train/checkpoint.h"

using namespace memscope::model;

namespace {

struct Fault {
  std::string name;
  std::set<EventKind> expected;
  std::vector<Command> plant, restore;  // restore applies 3 steps after plant
  // Planted into the memory state: when its first step starts a new sequence, the reset to M_0
  // wipes it before any step reads it, and it is counted apart ("wiped"), not as missed.
  bool in_state = false;
};

struct Planted {
  size_t fault;
  int64_t step;  // the first step that runs with the fault
};

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "demo-mqar";
  int64_t trials = 20, every = 113, window = 5, warmup = 300;
  int threads = 1;
  std::string mode = "inspect", ckpt;
  std::vector<std::string> sets;
  int list = 0;
  std::string dump;
  memscope::bench::BenchFlags flags("fault_bench");
  flags.add("--list", list).add("--dump", dump);
  flags.add("--preset", preset).add("--trials", trials).add("--every", every).add("--window", window);
  flags.add("--warmup", warmup).add("--threads", threads).add("--mode", mode).add("--ckpt", ckpt).add("--set", sets);
  if (!flags.parse(argc, argv)) return 2;
  if (mode != "inspect" && mode != "train") {
    std::cerr << "fault_bench: --mode is inspect or train, not " << mode << "\n";
    return 2;
  }
  memscope::model::set_compute_threads(threads);  // ATen and OpenBLAS
  const bool training = mode == "train";
  sets.push_back("engine.mode=" + mode);
  sets.push_back("engine.keyframe_every=0");
  // --ckpt: a trained model (a fault shows against a learnt task, not against chance).
  const Preset p = ckpt.empty() ? load_preset(preset, sets) : checkpoint_preset(read_checkpoint(ckpt), sets);
  const auto knob = [&](const char* name) { return knob_value(p, *find_knob(name)); };

  std::vector<Fault> faults;
  if (training) {
    faults.push_back({"corrupt_batch", {EventKind::Spike}, {Command{Command::Kind::CorruptBatch}}, {}});
    faults.push_back({"train_lr_spike",
                      {EventKind::Spike, EventKind::NonFinite},
                      {Command::set_knob("train.lr", std::to_string(30 * p.train.lr))},
                      {Command::set_knob("train.lr", knob("train.lr"))}});
  }
  Command nan{Command::Kind::InjectNan};
  nan.layer = 0;
  if (!training) faults.push_back({"nan_memory", {EventKind::NonFinite}, {nan}, {}, true});
  Command nan_gate{Command::Kind::NanGate};  // one head's lr gate, for one step
  nan_gate.layer = 0;
  nan_gate.head = 1;
  nan_gate.value = "lr";
  if (!training && p.model.has_memory()) faults.push_back({"nan_gate", {EventKind::NonFinite}, {nan_gate}, {}});
  if (!training) faults.push_back({"lr_spike",
                    {EventKind::Spike, EventKind::NormGrowth, EventKind::NonFinite},
                    {Command::set_knob("memory.lr.max", std::to_string(std::min(100.0, 100.0 * p.memory.max_lr)))},
                    {Command::set_knob("memory.lr.max", knob("memory.lr.max"))}});
  if (!training && p.memory.momentum_enabled && p.memory.optimiser != Optimiser::Dgd) {
    Command blowup{Command::Kind::ScaleMomentum};
    blowup.layer = 0;
    blowup.value = "100";
    faults.push_back({"momentum_blowup", {EventKind::Spike, EventKind::NormGrowth, EventKind::NonFinite}, {blowup}, {}, true});
  }
  if (!training && p.memory.optimiser == Optimiser::Muon)
    faults.push_back({"ns_degraded", {EventKind::NsError}, {Command::set_knob("memory.ns.steps", "1")},
                      {Command::set_knob("memory.ns.steps", knob("memory.ns.steps"))}});

  const auto branch = ckpt.empty() ? std::make_unique<Branch>(0, p) : std::make_unique<Branch>(0, std::filesystem::path(ckpt), sets);
  std::vector<Event> events;
  std::vector<Planted> planted;
  const int64_t total = warmup + every * trials * static_cast<int64_t>(faults.size());
  std::ofstream csv;
  if (!dump.empty()) {
    csv.open(dump);
    csv << "step,token,layer,head,norm_m,norm_s,loss,grad_norm,update_max,update_median,ns_error,ns_smin,ns_smax,planted\n";
  }
  std::map<int64_t, std::vector<Command>> restores;
  std::map<int64_t, int64_t> token_at;  // step → its token's place in the sequence (inspect frames)
  size_t next = 0;
  for (int64_t s = 0; s < total; ++s) {
    const int64_t done = branch->step();
    if (done >= warmup && (done - warmup) % every == 0) {
      const Fault& f = faults[next % faults.size()];
      for (const auto& c : f.plant) branch->apply(c);
      if (!f.restore.empty()) restores[done + (training ? 1 : 3)] = f.restore;
      planted.push_back({next % faults.size(), done + 1});
      ++next;
    }
    if (auto it = restores.find(done); it != restores.end()) {
      for (const auto& c : it->second) branch->apply(c);
      restores.erase(it);
    }
    const auto frame = branch->advance(events);
    token_at[frame->step] = frame->kind == FrameKind::Inspect ? frame->token_index : -1;
    if (csv.is_open()) {
      const std::string fault = !planted.empty() && planted.back().step == frame->step ? faults[planted.back().fault].name : "";
      if (frame->kind == FrameKind::Train) {
        std::vector<float> ratios = frame->module_update_ratio;
        std::sort(ratios.begin(), ratios.end());
        csv << frame->step << ",-1,-1,-1,,," << frame->loss << ',' << frame->grad_norm << ','
            << (ratios.empty() ? 0.0f : ratios.back()) << ',' << (ratios.empty() ? 0.0f : ratios[ratios.size() / 2]) << ','
            << ",,," << fault << '\n';
      }
      else if (!frame->weights.empty())
        for (int l = 0; l < frame->layers; ++l)
          for (int h = 0; h < frame->heads; ++h)
            csv << frame->step << ',' << frame->token_index << ',' << l << ',' << h << ','
                << frame->weight(l, h, 0, WeightMetric::NormM) << ',' << frame->weight(l, h, 0, WeightMetric::NormS)
                << ",,,,," << frame->weight(l, h, 0, WeightMetric::NsError) << ','
                << frame->weight(l, h, 0, WeightMetric::NsSmin) << ',' << frame->weight(l, h, 0, WeightMetric::NsSmax) << ','
                << fault << '\n';
    }
  }

  std::vector<int64_t> found(faults.size()), on_time(faults.size()), count(faults.size()), wiped(faults.size());
  std::set<size_t> explained;  // events inside some fault's window
  for (const Planted& pl : planted) {
    if (faults[pl.fault].in_state && token_at[pl.step] == 0) {
      ++wiped[pl.fault];
      continue;
    }
    ++count[pl.fault];
    int64_t first = -1;
    for (size_t i = 0; i < events.size(); ++i) {
      const Event& e = events[i];
      if (e.step < pl.step || e.step >= pl.step + window) continue;
      if (e.kind != EventKind::Command) explained.insert(i);
      if (faults[pl.fault].expected.count(e.kind) && (first < 0 || e.step < first)) first = e.step;
    }
    if (list) {
      std::vector<std::string> at_next;
      for (const Event& e : events)
        if (e.step == pl.step && e.kind != EventKind::Command) at_next.push_back(e.message);
      std::cout << nlohmann::json{{"planted", faults[pl.fault].name}, {"step", pl.step}, {"token", token_at[pl.step]},
                                  {"found_at", first}, {"events_at_next_step", at_next}}
                       .dump()
                << "\n";
    }
    if (first >= 0) ++found[pl.fault];
    if (first == pl.step) ++on_time[pl.fault];
  }
  int64_t false_positives = 0;
  std::map<std::string, int64_t> false_by_kind;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.kind == EventKind::Command || explained.count(i) || e.step <= warmup) continue;
    ++false_positives;
    ++false_by_kind[to_string(e.kind)];
  }
  for (size_t f = 0; f < faults.size(); ++f)
    std::cout << nlohmann::json{{"bench", "fault_recall"},
                                {"preset", preset},
                                {"mode", mode},
                                {"checkpoint", ckpt},
                                {"fault", faults[f].name},
                                {"planted", count[f]},
                                {"wiped_by_sequence_reset", wiped[f]},
                                {"found", found[f]},
                                {"recall", count[f] ? static_cast<double>(found[f]) / count[f] : 0.0},
                                {"at_the_next_step", count[f] ? static_cast<double>(on_time[f]) / count[f] : 0.0},
                                {"window", window}}
                     .dump()
              << std::endl;
  // Every kind together: what issue 19's target (95% found at the right step) reads against.
  int64_t planted_all = 0, found_all = 0, on_time_all = 0;
  for (size_t f = 0; f < faults.size(); ++f) {
    planted_all += count[f];
    found_all += found[f];
    on_time_all += on_time[f];
  }
  std::cout << nlohmann::json{{"bench", "fault_recall_all_kinds"},
                              {"preset", preset},
                              {"mode", mode},
                              {"checkpoint", ckpt},
                              {"planted", planted_all},
                              {"found", found_all},
                              {"recall", planted_all ? static_cast<double>(found_all) / planted_all : 0.0},
                              {"at_the_next_step", planted_all ? static_cast<double>(on_time_all) / planted_all : 0.0}}
                   .dump()
            << std::endl;
  const double watched = static_cast<double>(total - warmup);
  std::cout << nlohmann::json{{"bench", "fault_false_positives"},
                              {"preset", preset},
                              {"mode", mode},
                              {"steps_watched", total - warmup},
                              {"outside_fault_windows_per_10k_steps", 1e4 * static_cast<double>(false_positives) / watched},
                              {"by_kind", false_by_kind}}
                   .dump()
            << std::endl;
  return 0;
}
