// SessionWriter: records frames and events into a session directory (DESIGN "Sessions") on a
// background thread.
//
// - Frames are gathered into chunks of record.chunk_steps rows (or whatever arrived within
//   record.flush_seconds) and each chunk is written to a temporary file and renamed, so a killed
//   process loses at most the chunk in progress.
// - Each event is one line of events.jsonl, written with a single write().
// - Nothing is dropped. When frames waiting for the disk pass record.queue_mb, on_frame waits
//   (back-pressure on the engine) and a notice event says so. When a write fails (a full disk, a
//   removed directory) the frames stay in memory and the write is retried each second; on_frame
//   then throws, so the engine pauses with the reason instead of running on unrecorded.
#pragma once
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <variant>

#include "model/engine/timeline_source.h"
#include "model/session/frame_chunk.h"
#include "model/session/session_info.h"

namespace memscope::model {

// "runs/a" → "runs/a.memscope": sessions are NAME.memscope directories; a path already ending so
// is kept.
std::filesystem::path session_dir_for(const std::string& path);

struct SessionWriterStats {
  int64_t frames_written = 0, chunks = 0, events = 0;
  int64_t bytes = 0;           // chunk bytes written
  int64_t waits = 0;           // times on_frame waited for the disk
  double waited_seconds = 0;   // and for how long in all
};

class SessionWriter : public Recorder {
 public:
  // Creates the directory and writes session.json. Throws UserError when the directory already
  // holds anything (a recording never overwrites one) or cannot be created.
  SessionWriter(const std::filesystem::path& dir, SessionInfo info);
  ~SessionWriter() override;  // close(), reporting a failure on stderr
  SessionWriter(const SessionWriter&) = delete;
  SessionWriter& operator=(const SessionWriter&) = delete;

  void on_frame(const Frame& frame) override;
  void on_event(const Event& event) override;
  std::vector<Event> take_notices() override;

  // Writes everything queued and finishes session.json with the totals. Idempotent. Throws
  // UserError naming the frames that could not be written (the session before them is intact).
  void close() override;
  std::string path() const override { return dir_.string(); }

  const std::filesystem::path& dir() const { return dir_; }
  SessionWriterStats stats() const;

 private:
  struct QueuedFrame {
    Frame frame;
    int64_t seq;    // frames recorded before it
    int64_t bytes;  // frame.bytes(), counted against record.queue_mb
  };
  using Item = std::variant<QueuedFrame, Event>;
  void run();                     // the writer thread
  bool write_chunk();             // false when the write failed (frames kept)
  void take(Item& item);          // one queued item into the chunk or the event log
  void write_event_line(const Event& event);
  void write_info(bool closed);
  void notice(const std::string& message, int64_t step, int timeline);  // caller holds mutex_

  std::filesystem::path dir_;
  SessionInfo info_;
  int events_fd_ = -1;

  mutable std::mutex mutex_;
  std::condition_variable wake_writer_, wake_engine_;
  std::deque<Item> queue_;
  int64_t unwritten_bytes_ = 0;  // frames enqueued but not yet in a renamed chunk
  int64_t builder_bytes_ = 0;    // of those, the ones in builder_
  std::string error_;            // the last write failure, "" once a retry succeeds
  std::string event_error_;      // the last events.jsonl failure (noticed once)
  int64_t frames_enqueued_ = 0;  // the next frame's seq; an event's order
  bool engine_waiting_ = false;  // on_frame waits: write the partial chunk now
  bool closing_ = false, closed_ = false;
  std::vector<Event> notices_;
  SessionWriterStats stats_;
  double last_wait_notice_ = -1e9, wait_since_notice_ = 0;
  int64_t waits_since_notice_ = 0;

  ChunkBuilder builder_;  // writer thread only
  double chunk_started_ = 0;
  std::thread thread_;
};

}  // namespace memscope::model
