#include "app/gui/run.h"

namespace memscope::app {

bool Run::poll() {
  bool changed = false;
  model::EngineStatus now = source->status();
  if (now.running != status.running || now.idle != status.idle || now.steps != status.steps ||
      now.last_error != status.last_error || now.recording != status.recording ||
      now.breakpoints.size() != status.breakpoints.size() || now.pending_steps != status.pending_steps)
    changed = true;
  status = std::move(now);

  const int timelines = source->timelines();
  if (static_cast<int>(caches.size()) != timelines) {
    caches.resize(static_cast<size_t>(timelines));
    ring_generations_.resize(static_cast<size_t>(timelines), -1);
    changed = true;
  }
  // A rewind truncates the rings and erases the events of the abandoned future together: reload
  // the events whenever a ring's generation moved, else append the new ones.
  bool reload_events = false;
  for (int t = 0; t < timelines; ++t) {
    const auto ring = source->ring(t);
    if (!ring) continue;
    const int64_t generation = ring->generation();
    if (generation != ring_generations_[static_cast<size_t>(t)]) {
      reload_events = reload_events || ring_generations_[static_cast<size_t>(t)] >= 0;
      ring_generations_[static_cast<size_t>(t)] = generation;
    }
    changed = caches[static_cast<size_t>(t)].update(*ring) || changed;
  }
  // A rewind re-runs steps before it erases the abandoned events: keep reloading until the source
  // is idle again, so a poll in between cannot leave stale or missing events behind.
  if (reload_events) reload_pending_ = true;
  if (reload_pending_) {
    events = source->events();
    reload_pending_ = !status.idle;
    changed = true;
  } else if (auto fresh = source->events(events.size()); !fresh.empty()) {
    events.insert(events.end(), std::make_move_iterator(fresh.begin()), std::make_move_iterator(fresh.end()));
    changed = true;
  }
  return changed;
}

std::shared_ptr<const model::Frame> Run::frame(int timeline, int64_t step) const {
  const auto ring = source->ring(timeline);
  if (!ring) return nullptr;
  return step < 0 ? ring->latest() : ring->at_step(step);
}

std::shared_ptr<const model::Frame> Run::snapshot_frame(int timeline, int64_t step) const {
  // The cache knows which steps had snapshots: one lookup, no copy of the ring per frame. Null when
  // the ring has dropped that frame (then it has dropped every older one too).
  if (timeline < 0 || timeline >= static_cast<int>(caches.size())) return nullptr;
  const int64_t at = caches[static_cast<size_t>(timeline)].snapshot_step(step);
  return at < 0 ? nullptr : frame(timeline, at);
}

int64_t Run::steps(int timeline) const {
  return timeline < static_cast<int>(status.steps.size()) ? status.steps[static_cast<size_t>(timeline)] : 0;
}

ImU32 run_color(int run, int timeline) {
  // Distinct hues that read on the dark theme; the main run's main timeline is the accent blue.
  static const ImU32 palette[] = {IM_COL32(90, 170, 255, 255), IM_COL32(255, 150, 60, 255), IM_COL32(110, 210, 120, 255),
                                  IM_COL32(230, 100, 200, 255), IM_COL32(240, 220, 80, 255), IM_COL32(160, 130, 255, 255),
                                  IM_COL32(80, 220, 220, 255)};
  constexpr int n = sizeof palette / sizeof palette[0];
  return palette[(run * 3 + timeline) % n];
}

}  // namespace memscope::app
