// Engine: the backend thread (DESIGN principles 1 and 2). It owns the branches (the main timeline
// and any forks), applies commands between steps, pushes frames into each branch's ring and hands
// every frame and event to the sinks (a recording, the CLI's printer) on its own thread.
//
// Nothing here waits on a reader: the GUI polls rings, events and status. An exception or a NaN in
// a step pauses the engine with an error event; the engine stays alive and keeps taking commands.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/config/preset.h"
#include "model/engine/command.h"
#include "model/engine/frame_ring.h"
#include "model/probe/event.h"

namespace memscope::model {

class Branch;

// Receives every frame and event of every timeline, in order, on the engine thread. A sink must
// not block for long: the engine waits for it (a recording must not drop frames).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  virtual void on_frame(const Frame& frame) = 0;
  virtual void on_event(const Event& event) = 0;
};

// Makes the sink for "start recording PATH" (issue 6's session writer), given the preset.
using RecorderFactory = std::function<std::shared_ptr<FrameSink>(const std::string& path, const Preset& preset)>;

struct EngineOptions {
  std::string preset = "demo-mqar";  // a preset name or .toml path
  std::vector<std::string> sets;     // KEY=VALUE knob overrides
  std::string checkpoint;            // when set, the run saved there (sets apply to its preset)
};

struct EngineStatus {
  bool running = false;       // stepping until paused
  bool idle = true;           // paused with no command waiting
  int64_t pending_steps = 0;  // left of a Step(n)
  std::vector<int64_t> steps; // per timeline
  Preset preset;              // the main timeline's knobs in force
  std::string last_error;     // empty when the last command and step succeeded
  std::vector<Breakpoint> breakpoints;
  bool recording = false;
};

class Engine {
 public:
  // Builds the main timeline on the caller's thread: a bad preset or checkpoint throws UserError here.
  explicit Engine(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void start();  // launches the engine thread, paused
  void stop();   // finishes the current step and joins

  // Thread-safe; never blocks on the engine's work.
  void post(Command command);
  // Blocks until every posted command is applied and the engine is paused (CLI and tests).
  void wait_idle();

  void add_sink(std::shared_ptr<FrameSink> sink);  // before start()
  void set_recorder_factory(RecorderFactory factory);  // before start()

  int timelines() const;
  std::shared_ptr<FrameRing> ring(int timeline = 0) const;
  std::vector<Event> events(size_t from = 0) const;
  EngineStatus status() const;

 private:
  void loop();
  void execute(const Command& command);  // engine thread
  void step_all();                       // engine thread
  void emit(Event event);
  void emit_frame(const Frame& frame);
  void pause_with(Event event);

  std::vector<std::unique_ptr<Branch>> branches_;  // engine thread only (after start)
  std::vector<std::shared_ptr<FrameRing>> rings_;  // guarded by state_mutex_
  std::vector<std::shared_ptr<FrameSink>> sinks_;
  std::shared_ptr<FrameSink> recorder_;
  RecorderFactory recorder_factory_;
  std::vector<Breakpoint> breakpoints_;
  int next_breakpoint_id_ = 1;

  mutable std::mutex queue_mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Command> queue_;
  bool running_ = false, stopping_ = false, busy_ = false;
  int64_t pending_steps_ = 0;

  mutable std::mutex state_mutex_;
  std::vector<Event> events_;
  EngineStatus status_;

  std::thread thread_;
};

}  // namespace memscope::model
