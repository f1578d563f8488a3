#include "model/engine/timeline_source.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <map>
#include <set>
#include <iostream>

#include "model/util/errors.h"

namespace memscope::model {

namespace {

bool breakpoint_fires(const Breakpoint& b, const Event& e) {
  switch (b.kind) {
    case Breakpoint::Kind::Spike: return e.kind == EventKind::Spike;
    case Breakpoint::Kind::NonFinite: return e.kind == EventKind::NonFinite;
    case Breakpoint::Kind::NsError: return e.kind == EventKind::NsError && (b.threshold <= 0 || e.value > b.threshold);
    case Breakpoint::Kind::NormGrowth: return e.kind == EventKind::NormGrowth;
    case Breakpoint::Kind::AnyDetector: return e.is_detector();
    case Breakpoint::Kind::Step: return false;
  }
  return false;
}

}  // namespace

Event source_event(int64_t step, int timeline, const std::string& message, EventKind kind) {
  Event e;
  e.step = step;
  e.timeline = timeline;
  e.kind = kind;
  e.message = message;
  return e;
}

TimelineSource::TimelineSource(bool live) : live_(live) { status_.live = live; }

TimelineSource::~TimelineSource() { stop_thread(); }

void TimelineSource::start() {
  if (thread_.joinable()) return;
  refresh_status();
  thread_ = std::thread([this] { loop(); });
}

void TimelineSource::stop() { stop_thread(); }

void TimelineSource::stop_thread() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (recorder_) {
    try {
      stop_recording();
    } catch (const std::exception& e) {
      // Nobody is left to read an event: say what the recording lost where a user sees it.
      const std::string message = one_line(e.what());
      set_last_error(message);
      std::cerr << "memscope: " << message << "\n";
    }
  }
}

void TimelineSource::post(Command command) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue_.push_back(std::move(command));
  }
  wake_.notify_all();
}

void TimelineSource::wait_idle() {
  std::unique_lock<std::mutex> lock(queue_mutex_);
  idle_.wait(lock, [&] { return stopping_ || (queue_.empty() && !busy_ && !running_ && pending_steps_ == 0); });
}

bool TimelineSource::wait_idle_for(double seconds) {
  std::unique_lock<std::mutex> lock(queue_mutex_);
  return idle_.wait_for(lock, std::chrono::duration<double>(seconds),
                        [&] { return stopping_ || (queue_.empty() && !busy_ && !running_ && pending_steps_ == 0); });
}

void TimelineSource::set_last_step(int64_t last) { last_step_ = std::max<int64_t>(0, last); }

void TimelineSource::add_sink(std::shared_ptr<FrameSink> sink) { sinks_.push_back(std::move(sink)); }

void TimelineSource::set_recorder_factory(RecorderFactory factory) { recorder_factory_ = std::move(factory); }

int TimelineSource::timelines() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return static_cast<int>(rings_.size());
}

std::shared_ptr<FrameRing> TimelineSource::ring(int timeline) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (timeline < 0 || timeline >= static_cast<int>(rings_.size())) return nullptr;
  return rings_[static_cast<size_t>(timeline)];
}

std::vector<Event> TimelineSource::events(size_t from) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (from >= events_.size()) return {};
  return {events_.begin() + static_cast<std::ptrdiff_t>(from), events_.end()};
}

EngineStatus TimelineSource::status() const {
  EngineStatus s;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    s = status_;
  }
  std::lock_guard<std::mutex> lock(queue_mutex_);
  s.running = running_;
  s.pending_steps = pending_steps_;
  s.idle = queue_.empty() && !busy_ && !running_ && pending_steps_ == 0;
  return s;
}

void TimelineSource::loop() {
  for (;;) {
    Command command;
    bool have_command = false;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || running_ || pending_steps_ > 0; });
      if (stopping_) break;
      // Commands land between steps, never inside one. A Step(n) in progress finishes before the
      // commands queued after it (scripts read in order); only a Pause cuts it short. While
      // running freely, each command lands before the next step.
      if (!queue_.empty()) {
        auto next = queue_.begin();
        if (pending_steps_ > 0)
          next = std::find_if(queue_.begin(), queue_.end(), [](const Command& c) { return c.kind == Command::Kind::Pause; });
        if (next != queue_.end()) {
          command = std::move(*next);
          queue_.erase(next);
          have_command = true;
        }
      }
      busy_ = true;
    }
    if (have_command) execute(command);
    else step_all();
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      busy_ = false;
    }
    idle_.notify_all();
  }
  idle_.notify_all();
}

void TimelineSource::emit(Event event) {
  for (const auto& sink : sinks_) sink->on_event(event);
  if (recorder_) recorder_->on_event(event);
  std::lock_guard<std::mutex> lock(state_mutex_);
  events_.push_back(std::move(event));
}

void TimelineSource::emit_frame(const Frame& frame) {
  for (const auto& sink : sinks_) sink->on_frame(frame);
  if (!recorder_) return;
  try {
    recorder_->on_frame(frame);
  } catch (const std::exception& e) {
    // The recorder kept the frame; it cannot write it yet. Running on would pile up more.
    const std::string message = one_line(e.what());
    set_last_error(message);
    pause_with(source_event(frame.step, frame.timeline, "paused: " + message, EventKind::Error));
  }
}

void TimelineSource::publish(const std::vector<Event>& events, std::vector<Event>& fired) {
  bool paused_for_nan = false;
  for (const auto& e : events) {
    emit(e);
    for (const auto& b : breakpoints_)
      if (breakpoint_fires(b, e))
        fired.push_back(source_event(e.step, e.timeline, "break on " + describe(b) + ": " + e.message, EventKind::Breakpoint));
    // A NaN always pauses (issue 5 "Errors"), breakpoint or not; the first one says why, the
    // others of the same step are in the events already.
    if (e.kind == EventKind::NonFinite && !paused_for_nan) {
      fired.push_back(source_event(e.step, e.timeline, "paused: " + e.message, EventKind::Error));
      paused_for_nan = true;
    }
  }
}

void TimelineSource::check_step_breakpoints(int timeline, int64_t step, std::vector<Event>& fired) {
  for (const auto& b : breakpoints_)
    if (b.kind == Breakpoint::Kind::Step && timeline == 0 && step == b.step)
      fired.push_back(source_event(step, 0, "break on " + describe(b), EventKind::Breakpoint));
}

void TimelineSource::pause_with(Event event) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    running_ = false;
    pending_steps_ = 0;
  }
  emit(std::move(event));
}

void TimelineSource::set_rings(std::vector<std::shared_ptr<FrameRing>> rings) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  rings_ = std::move(rings);
}

void TimelineSource::erase_events(const std::function<bool(const Event&)>& drop) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  events_.erase(std::remove_if(events_.begin(), events_.end(), drop), events_.end());
}

void TimelineSource::set_last_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  status_.last_error = message;
}

void TimelineSource::refresh_status() {
  const Preset p = preset();
  const std::vector<int64_t> s = steps();
  std::string g = graphs();
  std::lock_guard<std::mutex> lock(state_mutex_);
  status_.preset = p;
  status_.graphs = std::move(g);
  status_.steps = s;
  status_.breakpoints = breakpoints_;
  status_.recording = recorder_ ? recorder_->path() : "";
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void TimelineSource::refresh_graphs() {
  std::string g = graphs();
  std::lock_guard<std::mutex> lock(state_mutex_);
  status_.graphs = std::move(g);
}

void TimelineSource::mark_busy(const std::string& what) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  status_.busy_since = what.empty() ? 0.0 : steady_seconds();
  status_.busy_with = what;
}

void TimelineSource::step_all() {
  mark_busy("step");
  std::vector<Event> fired = step();
  mark_busy("");
  refresh_graphs();
  if (nothing_yet_) {
    // Nothing to play yet: Step(n) still owes its n frames; look again shortly (commands land
    // meanwhile, so Pause and the rest answer within this wait).
    nothing_yet_ = false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return;
  }
  const std::vector<int64_t> now = steps();
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    status_.steps = now;
  }
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (pending_steps_ > 0) --pending_steps_;
  }
  if (last_step_ > 0 && now.front() >= last_step_)
    fired.push_back(source_event(now.front(), 0,
                                 "the run's last step, " + std::to_string(last_step_) + ", is taken",
                                 EventKind::Breakpoint));
  if (recorder_)
    for (auto& notice : recorder_->take_notices()) emit(std::move(notice));
  if (!fired.empty()) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      running_ = false;
      pending_steps_ = 0;
    }
    for (auto& e : fired) emit(std::move(e));
  }
}

void TimelineSource::start_recording(const Command& c) {
  if (recorder_) throw UserError("already recording to " + recorder_->path() + "; stop that recording first");
  if (!recorder_factory_) throw UserError("recording is not available in this build");
  recorder_ = recorder_factory_(c.path, preset());
  // The recording starts with what the rings still hold, so pressing record after the
  // interesting step still keeps it. Events are older than the frames' first step at most.
  std::vector<std::shared_ptr<FrameRing>> rings;
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    rings = rings_;
    events = events_;
  }
  // Each event goes in right after its timeline's frame of the same step, so that its place in
  // the recording (its order) is where it happened, not after every frame (issue 19: a save after
  // a rewind gave every event one order, and the old rewind markers then cut the replayed
  // timeline back). Rewind markers are left out: the rings hold what the rewinds left already.
  std::map<std::pair<int, int64_t>, std::vector<const Event*>> at_frame;
  std::vector<const Event*> before_frames;  // older than any frame held, or at no held step
  std::set<std::pair<int, int64_t>> held;
  for (const auto& ring : rings)
    for (const auto& frame : ring->frames()) held.insert({frame->timeline, frame->step});
  for (const auto& e : events) {
    if (e.kind == EventKind::Command && e.tensor == kRewindMarker) continue;
    if (held.count({e.timeline, e.step})) at_frame[{e.timeline, e.step}].push_back(&e);
    else before_frames.push_back(&e);
  }
  for (const Event* e : before_frames) recorder_->on_event(*e);
  for (const auto& ring : rings)
    for (const auto& frame : ring->frames()) {
      recorder_->on_frame(*frame);
      const auto it = at_frame.find({frame->timeline, frame->step});
      if (it == at_frame.end()) continue;
      for (const Event* e : it->second) recorder_->on_event(*e);
      at_frame.erase(it);  // a step held twice (never, after truncation) gets its events once
    }
}

void TimelineSource::end_recording(const std::string& why) {
  if (!recorder_) return;
  const std::vector<int64_t> now = steps();
  emit(source_event(now.empty() ? 0 : now.front(), 0,
                    "recording " + recorder_->path() + " stopped: " + why + "; start a new one for the new run"));
  stop_recording();
  refresh_status();
}

void TimelineSource::stop_recording() {
  auto recorder = std::move(recorder_);
  recorder_.reset();
  recorder->close();
}

void TimelineSource::execute(const Command& c) {
  using K = Command::Kind;
  struct Busy {  // a command that takes long (rewind, fork, a restart) shows in the GUI too
    TimelineSource& source;
    ~Busy() { source.mark_busy(""); }
  } busy{*this};
  mark_busy(describe(c));
  const std::vector<int64_t> before = steps();
  const int64_t at_step = c.timeline >= 0 && c.timeline < static_cast<int>(before.size())
                              ? before[static_cast<size_t>(c.timeline)]
                              : 0;
  std::string error;
  try {
    std::vector<Event> events;
    switch (c.kind) {
      case K::Run:
      case K::Pause:
      case K::Step: {
        if (c.kind != K::Pause && last_step_ > 0 && before.front() >= last_step_)
          throw UserError("the run has taken all its " + std::to_string(last_step_) + " steps");
        std::lock_guard<std::mutex> lock(queue_mutex_);
        if (c.kind == K::Run) running_ = true;
        if (c.kind == K::Pause) running_ = false, pending_steps_ = 0;
        if (c.kind == K::Step) {
          if (c.count < 1) throw UserError("step: the count must be at least 1");
          pending_steps_ += c.count;
        }
        break;
      }
      case K::AddBreakpoint: {
        Breakpoint b = c.breakpoint;
        b.id = next_breakpoint_id_++;
        breakpoints_.push_back(b);
        break;
      }
      case K::RemoveBreakpoint: {
        const auto it = std::find_if(breakpoints_.begin(), breakpoints_.end(),
                                     [&](const Breakpoint& b) { return b.id == c.breakpoint.id; });
        if (it == breakpoints_.end()) throw UserError("no breakpoint " + std::to_string(c.breakpoint.id));
        breakpoints_.erase(it);
        break;
      }
      case K::StartRecording: start_recording(c); break;
      case K::StopRecording:
        if (!recorder_) throw UserError("not recording");
        stop_recording();
        break;
      default:
        if (c.timeline < 0 || c.timeline >= static_cast<int>(before.size()))
          throw UserError("timeline " + std::to_string(c.timeline) + " does not exist");
        apply(c, events);
    }
    for (auto& e : events) emit(std::move(e));
  } catch (const std::exception& e) {
    error = one_line(e.what());
  }
  if (error.empty()) emit(source_event(at_step, c.timeline, describe(c)));
  else emit(source_event(at_step, c.timeline, describe(c) + ": " + error, EventKind::Error));
  set_last_error(error);
  refresh_status();
}

}  // namespace memscope::model
