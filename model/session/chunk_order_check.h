// The step, seq and timeline columns of a session's chunks are not trusted blindly (issue 17): a
// chunk whose columns contradict themselves, its file number or the chunks before it is damaged,
// and is skipped whole, so that one bad column never cuts frames from intact chunks.
//
// What a recording guarantees (SessionWriter, the engine):
// - seq counts the frames recorded before a frame: consecutive within a chunk, increasing across
//   chunks, at least the chunk's file number (every earlier chunk holds a frame), below the closed
//   session's frame total;
// - a timeline advances at most one step per recorded frame (whatever the timeline of the frames
//   between), so a step never runs ahead of its timeline's newest by more than the seqs between;
// - a timeline goes back only for a rewind: the re-run frames come just before the rewind's marker
//   event (at a step at or after theirs), and the steps after the marker go on from its step.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace memscope::model {

struct RewindMark {
  int64_t order = 0;  // frames recorded before the marker
  int64_t step = 0;   // the timeline continues from here
  int timeline = 0;
};

class ChunkOrderCheck {
 public:
  // `marks`: every rewind marker of the session; `marks_complete`: false when events.jsonl lost
  // lines (then going back is not held against a chunk). `frames`: the closed session's frame
  // total, −1 when unknown.
  ChunkOrderCheck(std::vector<RewindMark> marks, bool marks_complete, int64_t frames);

  // "" when chunk `number`'s columns are consistent (they then become the reference for the next
  // chunk), else the reason, one line.
  std::string accept(int64_t number, const std::vector<int64_t>& steps, const std::vector<int64_t>& seqs,
                     const std::vector<int32_t>& timelines);

  static constexpr int64_t kMaxStep = int64_t{1} << 53;  // beyond any run; doubles still count it exactly

 private:
  struct Newest {
    int64_t step, seq;
  };
  // Applies the markers logged before `seq` to `newest` (a rewind cut its timeline back).
  void apply_marks_before(int64_t seq, std::map<int, Newest>& newest, size_t& next_mark) const;
  bool rerun_explained(int timeline, int64_t seq, int64_t step) const;

  std::vector<RewindMark> marks_;  // by order
  bool marks_complete_;
  int64_t frames_;
  int64_t last_seq_ = -1;
  std::map<int, Newest> newest_;  // per timeline, over the accepted chunks
  size_t next_mark_ = 0;
};

}  // namespace memscope::model
