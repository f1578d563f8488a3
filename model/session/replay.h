// Replay: a recorded session as a timeline source (DESIGN principle 1). It plays the recorded
// frames into the same rings, with the recorded events, so the GUI and the CLI drive and watch a
// recording exactly as they do the live engine: run, pause, step n, breakpoints (they fire on the
// recorded detector events, and a recorded NaN pauses as the live run did), and recording (a
// replay can be re-recorded, e.g. to keep part of it). Rewind seeks to any recorded step,
// backwards or forwards.
//
// Frames play in the order they were recorded, so a fork appears where it was made and then moves
// in step with the main timeline. One replay step plays the next frame of the main timeline with
// the frames the other timelines recorded after it.
//
// A recording is read-only: knob changes, resets, presets, checkpoints and forks need the live
// engine and are refused with a one-line error.
//
// Following (issue 22's --follow): a session still being recorded, e.g. rank 0's session of a
// distributed training run, plays as it grows. At the end of what is on disk the replay re-reads
// the session (at most twice a second) instead of stopping, and the new chunks and events play on.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/engine/timeline_source.h"
#include "model/session/session_reader.h"

namespace memscope::model {

class Replay : public TimelineSource {
 public:
  // Opens the session (UserError when it is not one); damage is reported by reader(). `follow`:
  // wait for more at the end instead of pausing there.
  explicit Replay(const std::string& session_path, bool follow = false);
  ~Replay() override;

  // The session as opened (following: as last re-read, so call it from the source's thread
  // only, or before start()); dir() is safe from any thread.
  const SessionReader& reader() const { return *reader_; }
  const std::filesystem::path& dir() const { return dir_; }
  bool following() const { return follow_; }

 protected:
  std::vector<Event> step() override;
  void apply(const Command& command, std::vector<Event>& events) override;
  Preset preset() const override { return preset_; }
  std::vector<int64_t> steps() const override { return position_; }

 private:
  struct Entry {
    int64_t seq;
    int timeline;
    size_t index;  // into reader().steps(timeline)
    int64_t step;
  };
  // Plays entry next_ with the events logged up to it; throws UserError for a damaged chunk.
  void play(std::vector<Event>& fired);
  void skip();  // passes over entry next_ (its chunk does not decode)
  void seek(int timeline, int64_t step);
  // Builds order_ and events_ from reader_; rings for timelines not seen before. The caller sets
  // next_ and main_left_.
  void index_reader();
  // Following: re-reads the session; true when it now holds frames not played yet.
  bool refresh();
  // Frames of timeline 0 in order_ from next_ on (main_left_).
  size_t main_entries_left() const;

  std::shared_ptr<const SessionReader> reader_;
  std::filesystem::path dir_;  // reader_'s, fixed: following swaps reader_ on the source's thread
  Preset preset_;
  std::vector<Entry> order_;     // every frame of every timeline, in recorded order
  size_t next_ = 0;              // the next entry to play
  size_t main_left_ = 0;         // entries of timeline 0 from next_ on
  std::vector<Event> events_;    // recorded, in logged order
  size_t next_event_ = 0;
  std::vector<int64_t> position_;  // the step each timeline shows (0: none yet)
  std::vector<std::shared_ptr<FrameRing>> rings_;
  bool follow_ = false;
  double last_refresh_ = 0;  // steady seconds
};

}  // namespace memscope::model
