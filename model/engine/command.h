// Commands flow from the GUI or CLI into the engine (DESIGN principle 2). They are applied only
// between steps, and each is logged as an event with the step it was applied at.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace memscope::model {

// What stops a running engine. Detector breakpoints fire on that detector's events.
struct Breakpoint {
  enum class Kind { Spike, NonFinite, NsError, NormGrowth, AnyDetector, Step };
  Kind kind = Kind::AnyDetector;
  double threshold = 0;  // NsError: fire when the error exceeds this (0: detect.ns_error)
  int64_t step = 0;      // Step: fire when the timeline reaches this step
  int id = 0;            // given by the engine
};
const char* to_string(Breakpoint::Kind kind);
// Parses "nan", "spike", "ns_error", "ns_error>0.3", "norm_growth", "any", "step==100" or
// "step=100"; throws UserError naming the text otherwise.
Breakpoint parse_breakpoint(const std::string& text);
std::string describe(const Breakpoint& b);

struct Command {
  enum class Kind {
    Run,             // step until paused
    Pause,
    Step,            // `count` steps, then pause
    SetKnob,         // `knob` = `value` (a TOML literal); restart knobs rebuild the model
    ResetMomentum,   // S = 0 for `layer`/`head` (−1: all) of the inspect state
    ResetMemory,     // M = M_0, S = 0, window emptied for `layer`/`head`
    LoadPreset,      // `path`: a preset name or .toml, with `sets`
    SaveCheckpoint,  // `path`
    LoadCheckpoint,  // `path`, with `sets` on its stored preset
    AddBreakpoint,   // `breakpoint`
    RemoveBreakpoint,  // `breakpoint.id`
    Rewind,          // back to `step`: restore the keyframe at or before it and re-run
    Fork,            // a second timeline from `step`, with `sets` applied there
    StartRecording,  // `path`
    StopRecording,
    InjectNan,       // fault injection: NaN into `layer`/`head` of the inspect memory
    ScaleMomentum,   // fault injection: S ×= `value` (a number) for `layer`/`head`: a momentum blow-up
    CorruptBatch,    // fault injection: the next training step trains on random tokens (a corrupt shard)
    NanGate,         // fault injection: the next inspect step reads NaN from the `value` gate (retain,
                     // lr or momentum) of `layer`/`head`: a gate whose weights or input went bad
  };
  Kind kind = Kind::Pause;
  int64_t count = 1;
  int64_t step = 0;
  std::string knob, value, path;
  std::vector<std::string> sets;  // KEY=VALUE knob changes
  int layer = -1, head = -1;
  Breakpoint breakpoint;
  int timeline = 0;  // which timeline a state command targets

  static Command run() { return {Kind::Run}; }
  static Command pause() { return {Kind::Pause}; }
  static Command steps(int64_t n) {
    Command c{Kind::Step};
    c.count = n;
    return c;
  }
  static Command set_knob(std::string knob, std::string value) {
    Command c{Kind::SetKnob};
    c.knob = std::move(knob);
    c.value = std::move(value);
    return c;
  }
  static Command rewind(int64_t step) {
    Command c{Kind::Rewind};
    c.step = step;
    return c;
  }
  static Command start_recording(std::string path) {
    Command c{Kind::StartRecording};
    c.path = std::move(path);
    return c;
  }
  static Command fork(int64_t step, std::vector<std::string> sets) {
    Command c{Kind::Fork};
    c.step = step;
    c.sets = std::move(sets);
    return c;
  }
};

// One line for the event log, e.g. "set train.lr = 0.01", "rewind to step 40".
std::string describe(const Command& c);

// Commands that change the model or its state; a rewind re-applies these at their steps.
bool changes_state(const Command& c);

}  // namespace memscope::model
