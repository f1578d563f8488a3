// Event: something that happened at a step of a timeline: a detector fired, a command was
// applied, a breakpoint stopped the run, a step failed. Plain data, shown on the GUI's timeline,
// printed by the CLI and written to a session's events.jsonl.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

namespace memscope::model {

enum class EventKind {
  Spike,       // a z-score above detect.spike_threshold (SPEC §8)
  NonFinite,   // a NaN/Inf in a named layer, head and tensor
  NsError,     // NS orthogonality error above detect.ns_error
  NormGrowth,  // ‖M‖ grew by more than detect.norm_growth between probes
  Command,     // a command was applied (its text is the message)
  Breakpoint,  // a breakpoint paused the engine
  Error,       // a step threw; the engine paused and is still alive
  Notice,      // how the engine runs changed, without a pause: a CUDA graph captured, or a capture
               // failed and the model runs without it (engine.cuda_graph)
};
const char* to_string(EventKind kind);

// Event::tensor of the command event a rewind logs (a recording's marker): the timeline keeps the
// steps <= Event::step and re-runs from there.
inline constexpr const char* kRewindMarker = "rewind";  // "spike", "nonfinite", "ns_error", "norm_growth", …

struct Event {
  int64_t step = 0;  // the timeline step it belongs to (commands: applied before step + 1)
  int timeline = 0;
  EventKind kind = EventKind::Command;
  std::string message;  // one line, says what and where
  // Where, when it is a place in the model (−1 / empty otherwise).
  int layer = -1, head = -1;
  std::string tensor;  // "M", "S", "retain", "loss", "grad_norm", …
  double value = std::numeric_limits<double>::quiet_NaN();
  // In a recording: how many frames the session held when the event was logged, which places it
  // among the frames (−1: not from a recording).
  int64_t order = -1;

  bool is_detector() const {
    return kind == EventKind::Spike || kind == EventKind::NonFinite || kind == EventKind::NsError ||
           kind == EventKind::NormGrowth;
  }
};

}  // namespace memscope::model
