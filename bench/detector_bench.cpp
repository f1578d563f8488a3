// Detector false positives on healthy runs (issue 19): a preset stepped N times in one engine mode
// with the default detector thresholds, and the events counted by kind and by series, per 10,000
// steps. A healthy demo should be quiet: events here are noise that buries the real faults.
// One JSON line per run. Flags: --preset P (demo-mqar), --mode inspect|train, --steps N, --threads T,
// --set K=V (repeatable), --list 1 (also one JSON line per event, with its token and message: run with a
// low detect.spike_threshold to see the z-scores a healthy run reaches).
#include <torch/torch.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "model/util/compute_threads.h"
#include "model/config/preset.h"
#include "model/engine/branch.h"

using namespace memscope::model;

int main(int argc, char** argv) {
  std::string preset = "demo-mqar", mode = "inspect";
  int64_t steps = 2000;
  int threads = 1;
  std::vector<std::string> sets;
  int list = 0;
  memscope::bench::BenchFlags flags("detector_bench");
  flags.add("--preset", preset).add("--mode", mode).add("--steps", steps).add("--threads", threads).add("--set", sets);
  flags.add("--list", list);
  if (!flags.parse(argc, argv)) return 2;
  memscope::model::set_compute_threads(threads);  // ATen and OpenBLAS
  sets.push_back("engine.mode=" + mode);
  sets.push_back("engine.keyframe_every=0");
  Branch branch(0, load_preset(preset, sets));
  std::map<std::string, int64_t> by_kind, by_series, by_token;
  std::map<int64_t, int64_t> token_at;  // step → the token's place in its sequence (inspect frames)
  std::vector<Event> events;
  for (int64_t s = 0; s < steps; ++s) {
    const auto frame = branch.advance(events);
    token_at[frame->step] = frame->kind == FrameKind::Inspect ? frame->token_index : -1;
  }
  for (const Event& e : events) {
    if (e.kind == EventKind::Command) continue;
    ++by_kind[to_string(e.kind)];
    // Where in the sequence inspect events fire: at its start a memory reset is expected.
    if (token_at[e.step] >= 0) ++by_token[std::string(to_string(e.kind)) + " @token " + std::to_string(token_at[e.step])];
    // The series without its layer and head: "spike M", "norm_growth M", "spike loss", …
    ++by_series[std::string(to_string(e.kind)) + " " + (e.tensor.empty() ? "-" : e.tensor)];
    if (list)
      std::cout << nlohmann::json{{"event", to_string(e.kind)}, {"step", e.step}, {"token", token_at[e.step]},
                                  {"layer", e.layer}, {"head", e.head}, {"tensor", e.tensor}, {"message", e.message}}
                       .dump()
                << "\n";
  }
  nlohmann::json per_10k = nlohmann::json::object(), series = nlohmann::json::object();
  for (const auto& [k, n] : by_kind) per_10k[k] = 1e4 * static_cast<double>(n) / static_cast<double>(steps);
  for (const auto& [k, n] : by_series) series[k] = n;
  nlohmann::json tokens = nlohmann::json::object();
  for (const auto& [k, n] : by_token) tokens[k] = n;
  std::cout << nlohmann::json{{"bench", "detector_false_positives"}, {"preset", preset}, {"mode", mode},
                              {"steps", steps}, {"events_per_10k_steps", per_10k}, {"events_by_series", series}, {"inspect_events_by_token", tokens}}
                   .dump()
            << std::endl;
  return 0;
}
