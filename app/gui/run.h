// Run: one timeline source the GUI shows (the live Engine, a session's Replay, or another run of a
// preset for the compare view) and what the GUI has polled from it. Polling never waits on the
// source (DESIGN principle 2): it copies the status, the new events and the new frames' series.
#pragma once
#include <imgui.h>

#include <memory>
#include <string>
#include <vector>

#include "app/gui/timeline_cache.h"
#include "model/engine/timeline_source.h"

namespace memscope::app {

struct Run {
  std::string label;  // "live demo-mqar", "session run1.memscope", a compare entry's label
  std::unique_ptr<model::TimelineSource> source;
  bool live = true;
  std::vector<TimelineCache> caches;  // per timeline of the source
  model::EngineStatus status;         // as of the last poll
  std::vector<model::Event> events;   // every event the source holds, in logged order

  // Copies what changed since the last poll. True when anything did.
  bool poll();
  // The frame of `timeline` at `step` if the ring still holds it; step < 0: the newest.
  std::shared_ptr<const model::Frame> frame(int timeline, int64_t step) const;
  // The newest frame at or before `step` (< 0: any) that carries matrix snapshots, as of the last poll.
  std::shared_ptr<const model::Frame> snapshot_frame(int timeline, int64_t step) const;
  int64_t steps(int timeline = 0) const;  // steps the timeline has completed
  bool busy() const { return status.running || !status.idle || status.pending_steps > 0; }
  // Attached to a run in another process (memscope --attach, issue 22).
  bool remote() const { return !status.remote.empty(); }
  // Why the source refuses this command ("rewind", "fork": model::command_name), "" when it takes it.
  std::string refused(const std::string& command) const {
    const auto it = status.refused.find(command);
    return it == status.refused.end() ? "" : it->second;
  }

 private:
  std::vector<int64_t> ring_generations_;
  bool reload_pending_ = false;
};

// The colour of run r, timeline t in plots and legends (stable as runs are added).
ImU32 run_color(int run, int timeline);

}  // namespace memscope::app
