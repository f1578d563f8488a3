#include "model/session/replay.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "model/session/session_writer.h"
#include "model/util/errors.h"

namespace memscope::model {

Replay::Replay(const std::string& session_path, bool follow)
    : TimelineSource(/*live=*/false),
      reader_(std::make_shared<SessionReader>(session_path)),
      dir_(reader_->dir()),
      follow_(follow) {
  try {
    preset_ = reader_->preset();
  } catch (const UserError& e) {
    throw UserError(reader_->dir().string() + ": the recorded preset does not load: " + one_line(e.what()));
  }
  index_reader();
  main_left_ = main_entries_left();
  set_rings(rings_);
  // Re-recording a replay writes a new session of the same run.
  set_recorder_factory([this](const std::string& path, const Preset& preset) -> std::shared_ptr<Recorder> {
    SessionInfo info = session_info_for(preset, reader_->info().device, reader_->info().vocab);
    return std::make_shared<SessionWriter>(session_dir_for(path), info);
  });
  refresh_status();
}

Replay::~Replay() { stop_thread(); }

size_t Replay::main_entries_left() const {
  return static_cast<size_t>(std::count_if(order_.begin() + static_cast<std::ptrdiff_t>(next_), order_.end(),
                                           [](const Entry& e) { return e.timeline == 0; }));
}

void Replay::index_reader() {
  const int timelines = std::max(1, reader_->timelines());
  const auto budget = static_cast<int64_t>(preset_.engine.frame_budget_mb * 1024 * 1024);
  order_.clear();
  for (int t = 0; t < timelines; ++t) {
    const auto steps = reader_->steps(t);
    for (size_t i = 0; i < steps.size(); ++i) order_.push_back({reader_->seq_at(t, i), t, i, steps[i]});
    if (t >= static_cast<int>(rings_.size())) rings_.push_back(std::make_shared<FrameRing>(budget));
  }
  std::sort(order_.begin(), order_.end(), [](const Entry& a, const Entry& b) { return a.seq < b.seq; });
  events_ = reader_->events();
  std::stable_sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) { return a.order < b.order; });
  position_.resize(rings_.size(), 0);
}

bool Replay::refresh() {
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (now - last_refresh_ < 0.5) return false;
  last_refresh_ = now;
  std::shared_ptr<SessionReader> fresh;
  try {
    fresh = std::make_shared<SessionReader>(dir_.string());
  } catch (const UserError&) {
    return false;  // caught mid-write (session.json being replaced): try again next time
  }
  if (fresh->frame_count() <= reader_->frame_count() && fresh->events().size() <= events_.size()) {
    if (fresh->info().closed) reader_ = std::move(fresh);  // nothing more will come: step() ends the replay
    return false;
  }
  // The session only grows while it is recorded: what was played is a prefix of the new order.
  const int64_t played_seq = next_ > 0 ? order_[next_ - 1].seq : std::numeric_limits<int64_t>::min();
  const size_t timelines = rings_.size();
  reader_ = std::move(fresh);
  index_reader();
  next_ = static_cast<size_t>(std::upper_bound(order_.begin(), order_.end(), played_seq,
                                               [](int64_t seq, const Entry& e) { return seq < e.seq; }) -
                              order_.begin());
  main_left_ = main_entries_left();
  if (rings_.size() != timelines) set_rings(rings_);  // a fork recorded meanwhile
  return next_ < order_.size();
}

void Replay::play(std::vector<Event>& fired) {
  const Entry& e = order_[next_];
  auto frame = std::make_shared<const Frame>(reader_->frame_at(e.timeline, e.index));
  ++next_;
  if (e.timeline == 0) --main_left_;
  const auto t = static_cast<size_t>(e.timeline);
  position_[t] = frame->step;
  rings_[t]->push(frame);
  emit_frame(*frame);
  // The events logged before the next frame was recorded belong with this one.
  const int64_t until = next_ < order_.size() ? order_[next_].seq : std::numeric_limits<int64_t>::max();
  std::vector<Event> due;
  while (next_event_ < events_.size() && events_[next_event_].order <= until) due.push_back(events_[next_event_++]);
  publish(due, fired);
  check_step_breakpoints(e.timeline, frame->step, fired);
}

void Replay::skip() {
  if (next_ >= order_.size()) return;
  if (order_[next_].timeline == 0) --main_left_;
  ++next_;
}

std::vector<Event> Replay::step() {
  std::vector<Event> fired;
  try {
    if (next_ >= order_.size() && follow_ && !refresh() && !reader_->info().closed) {
      nothing_yet();  // still being recorded: wait for the next chunk (a closed one ends below)
      return fired;
    }
    if (next_ >= order_.size()) {
      std::vector<Event> rest(events_.begin() + static_cast<std::ptrdiff_t>(next_event_), events_.end());
      next_event_ = events_.size();
      publish(rest, fired);
      pause_with(source_event(position_[0], 0, "end of the recording at step " + std::to_string(position_[0])));
      return fired;
    }
    // The next main-timeline frame and what the other timelines recorded before the one after it;
    // when the main timeline has ended, one frame of the others.
    bool main_played = false;
    do {
      main_played = main_played || order_[next_].timeline == 0;
      play(fired);
    } while (next_ < order_.size() && main_left_ > 0 && !(main_played && order_[next_].timeline == 0));
  } catch (const std::exception& e) {
    // A chunk whose body is damaged: pause there with the reason; seeking past it still works.
    const std::string message = one_line(e.what());
    set_last_error(message);
    pause_with(source_event(position_[0], 0, "paused: " + message, EventKind::Error));
    skip();  // do not stop on it again
  }
  return fired;
}

void Replay::seek(int timeline, int64_t step) {
  if (step < 0) throw UserError("rewind: step " + std::to_string(step) + " is before the recording");
  // Where in the recorded order `timeline` reaches `step`: just after its last frame at or before it.
  size_t target = 0;
  bool any = false;
  for (size_t i = 0; i < order_.size(); ++i)
    if (order_[i].timeline == timeline && order_[i].step <= step) target = i + 1, any = true;
  if (!any)
    for (size_t i = 0; i < order_.size(); ++i)
      if (order_[i].timeline == timeline) {
        target = i;
        break;
      }
  if (target < next_) {
    // Back: every ring keeps what was played before the target; the events after it play again.
    std::vector<int64_t> last(rings_.size(), 0);
    for (size_t i = 0; i < target; ++i) last[static_cast<size_t>(order_[i].timeline)] = order_[i].step;
    for (size_t t = 0; t < rings_.size(); ++t) rings_[t]->truncate_after(last[t]);
    position_ = last;
    next_ = target;
    main_left_ = main_entries_left();
    const int64_t until = next_ < order_.size() ? order_[next_].seq : std::numeric_limits<int64_t>::max();
    next_event_ = static_cast<size_t>(
        std::upper_bound(events_.begin(), events_.end(), until, [](int64_t u, const Event& e) { return u < e.order; }) -
        events_.begin());
    erase_events([&](const Event& e) { return e.order > until; });
    return;
  }
  // Forward: play up to the target (the plots need their rows); breakpoints do not stop a seek,
  // and a damaged chunk's frames are passed over (the replay said so when it met them).
  std::vector<Event> ignored;
  while (next_ < target) {
    try {
      play(ignored);
    } catch (const UserError&) {
      skip();
    }
  }
}

void Replay::apply(const Command& c, std::vector<Event>& events) {
  if (c.kind == Command::Kind::Rewind) {
    seek(c.timeline, c.step);
    // As the engine does: a recording of this replay reads the frames that follow as the
    // timeline going on from here, not as damage (ChunkOrderCheck).
    Event marker = source_event(c.step, c.timeline, "timeline " + std::to_string(c.timeline) + " continues from step " +
                                                        std::to_string(c.step) + " (replay)");
    marker.tensor = kRewindMarker;
    events.push_back(std::move(marker));
    return;
  }
  throw UserError("a recording is read-only; " + describe(c) + " needs the live engine (memscope --preset ...)");
}

}  // namespace memscope::model
