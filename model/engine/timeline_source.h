// TimelineSource: what the GUI and the CLI drive and watch (DESIGN principle 1, "one timeline, two
// sources"). The live Engine and a recorded session's Replay are both one: a thread that applies
// commands between steps, pushes frames into one bounded ring per timeline, and hands every frame
// and event to the sinks and to a recording. Readers poll rings, events and status; nothing here
// ever waits on a reader (principle 2).
//
// This class owns what both sources share: the command queue and the run/pause/step transport,
// breakpoints, recording, the event log and the status. A subclass says what a step is and how
// the other commands apply.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/config/preset.h"
#include "model/engine/command.h"
#include "model/engine/frame_ring.h"
#include "model/engine/frame_sink.h"
#include "model/probe/event.h"

namespace memscope::model {

// A recording: the sink for "start recording PATH" given the preset and the device. close()
// finishes it and throws UserError when frames could not be written.
class Recorder : public FrameSink {
 public:
  virtual void close() = 0;
  virtual std::string path() const = 0;
};
using RecorderFactory = std::function<std::shared_ptr<Recorder>(const std::string& path, const Preset& preset)>;

struct EngineStatus {
  bool live = true;           // an Engine; false for a Replay
  bool running = false;       // stepping until paused
  bool idle = true;           // paused with no command waiting
  int64_t pending_steps = 0;  // left of a Step(n)
  std::vector<int64_t> steps; // per timeline
  Preset preset;              // the main timeline's knobs in force
  std::string last_error;     // empty when the last command and step succeeded
  std::vector<Breakpoint> breakpoints;
  std::string recording;      // the session being written, "" when none
  // What the main timeline's CUDA graphs do (Branch::graph_summary): "" where none is asked for.
  std::string graphs;
  // When the step or command in flight began (steady clock, seconds); 0 when none is. The GUI's
  // busy indicator shows how long a slow step (a HOPE step, a rewind, a step-into) has run.
  double busy_since = 0;
  std::string busy_with;      // "step", or the command's name
  // Attached to a run in another process (issue 22, model/remote); empty and zero for a local source.
  std::string remote;         // "host:port"
  std::string remote_server;  // who serves it: "memscope-cli train (pid 1234)"
  bool connected = true;      // false while the viewer waits for the run to serve again
  int64_t frames_missed = 0, events_missed = 0;  // what the run dropped for this viewer (never for a recording)
  // Commands this source refuses, by name ("rewind", "fork"), with the reason the GUI shows.
  std::map<std::string, std::string> refused;
};

// Seconds on the steady clock, the unit of EngineStatus::busy_since.
double steady_seconds();

class TimelineSource {
 public:
  virtual ~TimelineSource();
  TimelineSource(const TimelineSource&) = delete;
  TimelineSource& operator=(const TimelineSource&) = delete;

  // Virtual for the one source that runs elsewhere: RemoteSource forwards these over the wire.
  virtual void start();  // launches the thread, paused
  virtual void stop();   // finishes the current step and joins; a recording in progress is closed

  // Thread-safe; never blocks on the source's work.
  virtual void post(Command command);
  // Blocks until every posted command is applied and the source is paused (CLI and tests).
  virtual void wait_idle();
  // The same, for at most `seconds`: true when idle (the CLI polls it to notice Ctrl+C).
  virtual bool wait_idle_for(double seconds);

  // Timeline 0 takes no step past `last` (0: no bound), before start(): Run and Step stop there,
  // whenever they were posted, and are refused once it is reached. A served training run's
  // train.steps; as a step breakpoint, which fires only at that step, a viewer's Run posted while
  // the last step ran went on past it for good.
  void set_last_step(int64_t last);
  void add_sink(std::shared_ptr<FrameSink> sink);  // before start()
  void set_recorder_factory(RecorderFactory factory);  // before start()

  int timelines() const;
  std::shared_ptr<FrameRing> ring(int timeline = 0) const;
  std::vector<Event> events(size_t from = 0) const;
  virtual EngineStatus status() const;

 protected:
  explicit TimelineSource(bool live);

  // On the source's thread. One step of every timeline: emit each frame with emit_frame and its
  // events with publish(); returns what must pause the run (breakpoints, NaN), emitted after.
  virtual std::vector<Event> step() = 0;
  // Every command but the transport, breakpoints and recording. Throws UserError to refuse one;
  // events it makes go to `events`.
  virtual void apply(const Command& command, std::vector<Event>& events) = 0;
  virtual Preset preset() const = 0;         // the main timeline's knobs
  virtual std::vector<int64_t> steps() const = 0;
  virtual std::string graphs() const { return ""; }  // EngineStatus::graphs

  // Helpers for step() and apply().
  void emit(Event event);
  void emit_frame(const Frame& frame);  // a recording that fails pauses the run, keeping the frame
  // Emits a step's events and collects the breakpoints they fire (and the NaN pause) into `fired`.
  void publish(const std::vector<Event>& events, std::vector<Event>& fired);
  void check_step_breakpoints(int timeline, int64_t step, std::vector<Event>& fired);
  void pause_with(Event event);
  void set_rings(std::vector<std::shared_ptr<FrameRing>> rings);
  void erase_events(const std::function<bool(const Event&)>& drop);
  void set_last_error(const std::string& message);
  // step() had nothing to play yet (a session that is still being recorded): the step does not
  // count towards Step(n), and the source waits a moment before trying again.
  void nothing_yet() { nothing_yet_ = true; }
  // A command started a new run: the recording of the old one ends here, with an event saying why.
  void end_recording(const std::string& why);
  // The status's preset, steps, breakpoints and recording, from the subclass. Constructors call it
  // last, so status() is right before start() (a server announces the preset it serves).
  void refresh_status();
  // Subclass destructors call this first: the thread must not run a step on a half-destroyed object.
  void stop_thread();

 private:
  void loop();
  void execute(const Command& command);
  void step_all();
  void mark_busy(const std::string& what);  // "": nothing in flight
  void refresh_graphs();                    // the status's graphs, after each step
  void start_recording(const Command& command);
  void stop_recording();

  const bool live_;
  bool nothing_yet_ = false;  // on the source's thread only
  std::vector<std::shared_ptr<FrameSink>> sinks_;
  std::shared_ptr<Recorder> recorder_;
  RecorderFactory recorder_factory_;
  std::vector<Breakpoint> breakpoints_;
  int next_breakpoint_id_ = 1;
  int64_t last_step_ = 0;  // set_last_step; constant once started

  mutable std::mutex queue_mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Command> queue_;
  bool running_ = false, stopping_ = false, busy_ = false;
  int64_t pending_steps_ = 0;

  mutable std::mutex state_mutex_;
  std::vector<std::shared_ptr<FrameRing>> rings_;
  std::vector<Event> events_;
  EngineStatus status_;

  std::thread thread_;
};

// The event a source logs for a command or its own notices.
Event source_event(int64_t step, int timeline, const std::string& message, EventKind kind = EventKind::Command);

}  // namespace memscope::model
