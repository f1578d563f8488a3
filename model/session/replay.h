// Replay: a recorded session as a timeline source (DESIGN principle 1). It plays the recorded
// frames into the same rings, with the recorded events, so the GUI and the CLI drive and watch a
// recording exactly as they do the live engine: run, pause, step n, breakpoints (they fire on the
// recorded detector events, and a recorded NaN pauses as the live run did), and recording (a
// replay can be re-recorded). Rewind seeks to any recorded step, backwards or forwards.
//
// A recording is read-only: knob changes, resets, presets, checkpoints and forks need the live
// engine and are refused with a one-line error.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/engine/timeline_source.h"
#include "model/session/session_reader.h"

namespace memscope::model {

class Replay : public TimelineSource {
 public:
  // Opens the session (UserError when it is not one); damage is reported by reader().
  explicit Replay(const std::string& session_path);
  ~Replay() override;

  const SessionReader& reader() const { return *reader_; }

 protected:
  std::vector<Event> step() override;
  void apply(const Command& command, std::vector<Event>& events) override;
  Preset preset() const override { return preset_; }
  std::vector<int64_t> steps() const override;

 private:
  // Plays frame `cursor_[t]` of timeline t with its events; false at the end of the timeline.
  bool play(size_t t, std::vector<Event>& fired);
  void seek(size_t t, int64_t step);

  std::shared_ptr<const SessionReader> reader_;
  Preset preset_;
  std::vector<std::vector<int64_t>> steps_;  // per timeline, ascending
  std::vector<std::vector<Event>> events_;   // recorded, per timeline, in step order
  std::vector<size_t> cursor_, event_cursor_;
  std::vector<int64_t> position_;            // the step each timeline shows (0: before the first)
  std::vector<std::shared_ptr<FrameRing>> rings_;
};

}  // namespace memscope::model
