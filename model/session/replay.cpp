#include "model/session/replay.h"

#include <algorithm>

#include "model/util/errors.h"

namespace memscope::model {

Replay::Replay(const std::string& session_path)
    : TimelineSource(/*live=*/false), reader_(std::make_shared<SessionReader>(session_path)) {
  try {
    preset_ = reader_->preset();
  } catch (const UserError& e) {
    throw UserError(reader_->dir().string() + ": the recorded preset does not load: " + one_line(e.what()));
  }
  const int timelines = std::max(1, reader_->timelines());
  const auto budget = static_cast<int64_t>(preset_.engine.frame_budget_mb * 1024 * 1024);
  for (int t = 0; t < timelines; ++t) {
    steps_.push_back(reader_->steps(t));
    rings_.push_back(std::make_shared<FrameRing>(budget));
  }
  events_.resize(steps_.size());
  for (const Event& e : reader_->events())
    if (e.timeline >= 0 && static_cast<size_t>(e.timeline) < events_.size()) events_[static_cast<size_t>(e.timeline)].push_back(e);
  // The log is in the order things happened; a rewind in the recording logged steps that go back.
  // The replay shows the timeline as the index has it, so each event goes with its step.
  for (auto& list : events_)
    std::stable_sort(list.begin(), list.end(), [](const Event& a, const Event& b) { return a.step < b.step; });
  cursor_.assign(steps_.size(), 0);
  event_cursor_.assign(steps_.size(), 0);
  position_.assign(steps_.size(), 0);
  set_rings(rings_);
}

Replay::~Replay() { stop_thread(); }

std::vector<int64_t> Replay::steps() const { return position_; }

bool Replay::play(size_t t, std::vector<Event>& fired) {
  if (cursor_[t] >= steps_[t].size()) return false;
  auto frame = std::make_shared<const Frame>(reader_->frame_at(static_cast<int>(t), cursor_[t]));
  ++cursor_[t];
  position_[t] = frame->step;
  rings_[t]->push(frame);
  emit_frame(*frame);
  std::vector<Event> due;
  auto& list = events_[t];
  while (event_cursor_[t] < list.size() && list[event_cursor_[t]].step <= frame->step) due.push_back(list[event_cursor_[t]++]);
  publish(due, fired);
  check_step_breakpoints(static_cast<int>(t), frame->step, fired);
  return true;
}

std::vector<Event> Replay::step() {
  std::vector<Event> fired;
  bool any = false;
  for (size_t t = 0; t < steps_.size(); ++t) any = play(t, fired) || any;
  if (!any)
    pause_with(source_event(position_.empty() ? 0 : position_[0], 0,
                            "end of the recording at step " + std::to_string(position_.empty() ? 0 : position_[0])));
  return fired;
}

void Replay::seek(size_t t, int64_t step) {
  if (step < 0) throw UserError("rewind: step " + std::to_string(step) + " is before the recording");
  const auto& steps = steps_[t];
  if (step < position_[t]) {
    // Back: the ring keeps what it holds up to `step`; the events after it are played again later.
    rings_[t]->truncate_after(step);
    cursor_[t] = static_cast<size_t>(std::upper_bound(steps.begin(), steps.end(), step) - steps.begin());
    position_[t] = cursor_[t] == 0 ? 0 : steps[cursor_[t] - 1];
    const auto& list = events_[t];
    event_cursor_[t] = static_cast<size_t>(
        std::upper_bound(list.begin(), list.end(), position_[t], [](int64_t s, const Event& e) { return s < e.step; }) -
        list.begin());
    const int timeline = static_cast<int>(t);
    const int64_t kept = position_[t];
    erase_events([&](const Event& e) { return e.timeline == timeline && e.step > kept; });
    return;
  }
  // Forward: play the frames up to `step` (the plots need their rows); breakpoints do not stop a seek.
  std::vector<Event> ignored;
  while (cursor_[t] < steps.size() && steps[cursor_[t]] <= step) play(t, ignored);
}

void Replay::apply(const Command& c, std::vector<Event>& /*events*/) {
  if (c.kind == Command::Kind::Rewind) {
    seek(static_cast<size_t>(c.timeline), c.step);
    return;
  }
  throw UserError("a recording is read-only; " + describe(c) + " needs the live engine (memscope --preset ...)");
}

}  // namespace memscope::model
