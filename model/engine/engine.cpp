#include "model/engine/engine.h"

#include <algorithm>

#include "model/engine/branch.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

Event command_event(int64_t step, int timeline, const std::string& message, EventKind kind = EventKind::Command) {
  Event e;
  e.step = step;
  e.timeline = timeline;
  e.kind = kind;
  e.message = message;
  return e;
}

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

Engine::Engine(const EngineOptions& options) {
  if (options.checkpoint.empty())
    branches_.push_back(std::make_unique<Branch>(0, load_preset(options.preset, options.sets)));
  else
    branches_.push_back(std::make_unique<Branch>(0, std::filesystem::path(options.checkpoint), options.sets));
  rings_.push_back(branches_.front()->ring());
  status_.preset = branches_.front()->preset();
  status_.steps = {0};
}

Engine::~Engine() { stop(); }

void Engine::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::post(Command command) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue_.push_back(std::move(command));
  }
  wake_.notify_all();
}

void Engine::wait_idle() {
  std::unique_lock<std::mutex> lock(queue_mutex_);
  idle_.wait(lock, [&] { return stopping_ || (queue_.empty() && !busy_ && !running_ && pending_steps_ == 0); });
}

void Engine::add_sink(std::shared_ptr<FrameSink> sink) { sinks_.push_back(std::move(sink)); }

void Engine::set_recorder_factory(RecorderFactory factory) { recorder_factory_ = std::move(factory); }

int Engine::timelines() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return static_cast<int>(rings_.size());
}

std::shared_ptr<FrameRing> Engine::ring(int timeline) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (timeline < 0 || timeline >= static_cast<int>(rings_.size())) return nullptr;
  return rings_[static_cast<size_t>(timeline)];
}

std::vector<Event> Engine::events(size_t from) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (from >= events_.size()) return {};
  return {events_.begin() + static_cast<std::ptrdiff_t>(from), events_.end()};
}

EngineStatus Engine::status() const {
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

void Engine::loop() {
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

void Engine::emit(Event event) {
  for (const auto& sink : sinks_) sink->on_event(event);
  if (recorder_) recorder_->on_event(event);
  std::lock_guard<std::mutex> lock(state_mutex_);
  events_.push_back(std::move(event));
}

void Engine::emit_frame(const Frame& frame) {
  for (const auto& sink : sinks_) sink->on_frame(frame);
  if (recorder_) recorder_->on_frame(frame);
}

void Engine::pause_with(Event event) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    running_ = false;
    pending_steps_ = 0;
  }
  emit(std::move(event));
}

void Engine::step_all() {
  std::vector<Event> fired;  // breakpoints and NaN pauses, emitted after the step's own events
  for (auto& branch : branches_) {
    std::vector<Event> events;
    try {
      const auto frame = branch->advance(events);
      emit_frame(*frame);
    } catch (const std::exception& e) {
      const std::string message = one_line(e.what());
      {
        std::lock_guard<std::mutex> lock(state_mutex_);
        status_.last_error = message;
      }
      pause_with(command_event(branch->step(), branch->id(), "paused: step " + std::to_string(branch->step() + 1) +
                                                                   " failed: " + message, EventKind::Error));
      return;
    }
    for (const auto& e : events) {
      emit(e);
      for (const auto& b : breakpoints_)
        if (breakpoint_fires(b, e))
          fired.push_back(command_event(e.step, e.timeline, "break on " + describe(b) + ": " + e.message,
                                        EventKind::Breakpoint));
      // A NaN always pauses (issue 5 "Errors"), breakpoint or not.
      if (e.kind == EventKind::NonFinite)
        fired.push_back(command_event(e.step, e.timeline, "paused: " + e.message, EventKind::Error));
    }
    for (const auto& b : breakpoints_)
      if (b.kind == Breakpoint::Kind::Step && branch->id() == 0 && branch->step() == b.step)
        fired.push_back(command_event(branch->step(), 0, "break on " + describe(b), EventKind::Breakpoint));
  }
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    status_.steps.clear();
    for (const auto& b : branches_) status_.steps.push_back(b->step());
  }
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (pending_steps_ > 0) --pending_steps_;
  }
  if (!fired.empty()) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      running_ = false;
      pending_steps_ = 0;
    }
    for (auto& e : fired) emit(std::move(e));
  }
}

void Engine::execute(const Command& c) {
  using K = Command::Kind;
  Branch* target = c.timeline >= 0 && c.timeline < static_cast<int>(branches_.size())
                       ? branches_[static_cast<size_t>(c.timeline)].get()
                       : nullptr;
  const int64_t at_step = target ? target->step() : 0;
  std::string error;
  try {
    if (!target) throw UserError("timeline " + std::to_string(c.timeline) + " does not exist");
    auto on_frame = [this](const Frame& f) { emit_frame(f); };
    std::vector<Event> events;
    switch (c.kind) {
      case K::Run:
      case K::Pause:
      case K::Step: {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        if (c.kind == K::Run) running_ = true;
        if (c.kind == K::Pause) running_ = false, pending_steps_ = 0;
        if (c.kind == K::Step) {
          if (c.count < 1) throw UserError("step: the count must be at least 1");
          pending_steps_ += c.count;
        }
        break;
      }
      case K::SetKnob:
      case K::ResetMomentum:
      case K::ResetMemory:
      case K::InjectNan: target->apply(c); break;
      case K::LoadPreset:
      case K::LoadCheckpoint: {
        auto branch = c.kind == K::LoadPreset ? std::make_unique<Branch>(0, load_preset(c.path, c.sets))
                                              : std::make_unique<Branch>(0, std::filesystem::path(c.path), c.sets);
        branches_.clear();
        branches_.push_back(std::move(branch));
        std::lock_guard<std::mutex> lock(state_mutex_);
        rings_ = {branches_.front()->ring()};
        break;
      }
      case K::SaveCheckpoint: target->trainer().save(c.path); break;
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
      case K::Rewind: {
        const int64_t from = target->rewind(c.step, events, on_frame);
        // The detector events after the keyframe were re-made by the re-run: keep one copy.
        std::lock_guard<std::mutex> lock(state_mutex_);
        events_.erase(std::remove_if(events_.begin(), events_.end(),
                                     [&](const Event& e) { return e.timeline == c.timeline && e.is_detector() && e.step > from; }),
                      events_.end());
        break;
      }
      case K::Fork: {
        auto branch = target->fork(static_cast<int>(branches_.size()), c.step, c.sets, events, on_frame);
        branches_.push_back(std::move(branch));
        std::lock_guard<std::mutex> lock(state_mutex_);
        rings_.push_back(branches_.back()->ring());
        break;
      }
      case K::StartRecording:
        if (!recorder_factory_) throw UserError("recording is not available in this build of the engine");
        recorder_ = recorder_factory_(c.path, target->preset());
        break;
      case K::StopRecording: recorder_.reset(); break;
    }
    for (auto& e : events) emit(std::move(e));
  } catch (const std::exception& e) {
    error = one_line(e.what());
  }
  if (error.empty()) emit(command_event(at_step, c.timeline, describe(c)));
  else emit(command_event(at_step, c.timeline, describe(c) + ": " + error, EventKind::Error));
  std::lock_guard<std::mutex> lock(state_mutex_);
  status_.last_error = error;
  status_.preset = branches_.front()->preset();
  status_.steps.clear();
  for (const auto& b : branches_) status_.steps.push_back(b->step());
  status_.breakpoints = breakpoints_;
  status_.recording = recorder_ != nullptr;
}

}  // namespace memscope::model
