// SessionReader: opens a recorded session (DESIGN "Sessions") for random access by step.
//
// Only session.json must be intact. Every chunk is opened and checked; a chunk that is torn,
// corrupt or missing is skipped and reported (with its bytes and, where the totals or the events
// say, the steps lost), and everything else stays readable. A torn last line of events.jsonl is
// skipped too. Chunks are decoded lazily, a few at a time, so a long session never loads whole.
//
// The index follows each timeline as the engine left it. Frames are taken in recorded order (their
// seq): a frame whose step is at or before its timeline's newest (a rewind re-running steps)
// replaces the frames from that step on, and a rewind marker event cuts the timeline back to its
// step. The events of the abandoned futures are dropped with their frames.
#pragma once
#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "model/config/preset.h"
#include "model/probe/event.h"
#include "model/probe/frame.h"
#include "model/session/session_info.h"

namespace memscope::model {

struct SessionChunk {
  std::string file;  // name inside the session directory
  int64_t index = 0, rows = 0, first_step = 0, last_step = 0;
  uint64_t bytes = 0;
};

// Something of the session that could not be read, and what it cost.
struct SessionDamage {
  std::string file;
  uint64_t bytes = 0;   // of the file (or the torn part of events.jsonl)
  std::string reason;   // one line
};

struct SessionLoss {
  bool closed = true;           // session.json says the recording was stopped cleanly
  int64_t frames_lost = 0;      // −1: unknown (the session was not closed)
  int64_t first_step_lost = 0;  // 0 when none is known; from the totals or the events
  int64_t last_step_lost = 0;
  uint64_t bytes_lost = 0;      // damaged and unfinished files
  int64_t event_lines_skipped = 0;
};

class SessionReader {
 public:
  // `path` is the session directory (NAME.memscope, or NAME with the suffix left off). Throws
  // UserError when it is not a session or its session.json is unreadable.
  explicit SessionReader(const std::string& path);

  const std::filesystem::path& dir() const { return dir_; }
  const SessionInfo& info() const { return info_; }
  Preset preset() const;  // the recorded run's preset, from session.json

  const std::vector<SessionChunk>& chunks() const { return chunks_; }
  const std::vector<SessionDamage>& damage() const { return damage_; }
  const SessionLoss& loss() const { return loss_; }
  const std::vector<Event>& events() const { return events_; }

  int timelines() const { return static_cast<int>(index_.size()); }
  // The steps of a timeline, ascending, as the engine left it.
  std::vector<int64_t> steps(int timeline) const;
  int64_t frame_count() const { return frame_count_; }  // readable rows, replaced ones included
  // Chunks written before checksums (or by another writer): read as before, but unverified.
  int64_t unverified_chunks() const { return unverified_chunks_; }

  // The frame of `timeline` at `step`; nullopt when it was not recorded (or was lost).
  std::optional<Frame> frame(int timeline, int64_t step) const;
  // The frame at position `i` of steps(timeline), and its place in the recording.
  Frame frame_at(int timeline, size_t i) const;
  int64_t seq_at(int timeline, size_t i) const { return index_.at(static_cast<size_t>(timeline)).at(i).seq; }
  // Every frame of one chunk, in recorded order (export walks these).
  std::shared_ptr<const std::vector<Frame>> chunk_frames(size_t chunk) const;

 private:
  struct Location {
    int64_t step, seq;
    int32_t chunk, row;
  };
  struct Row {
    int64_t seq, step;
    int32_t timeline, chunk, row;
  };
  void load_chunks();
  void build_index();
  void load_events();
  void account_loss();

  std::filesystem::path dir_;
  SessionInfo info_;
  std::vector<SessionChunk> chunks_;
  std::vector<SessionDamage> damage_;
  SessionLoss loss_;
  std::vector<Event> events_;
  std::vector<Row> rows_;                      // while opening: every readable frame
  std::vector<std::vector<Location>> index_;  // per timeline, ascending steps
  int64_t frame_count_ = 0;
  int64_t unverified_chunks_ = 0;

  mutable std::mutex cache_mutex_;
  mutable std::list<std::pair<size_t, std::shared_ptr<const std::vector<Frame>>>> cache_;  // most recent first
};

}  // namespace memscope::model
