// FrameSink: where a timeline source hands every frame and event, in order, on its own thread (a
// recording, the CLI's printer). A sink must not block for long: the source waits for it, so a
// recording never drops frames (DESIGN principle 2: a slow GUI drops frames from its view, never
// from a recording).
#pragma once
#include <vector>

#include "model/probe/event.h"
#include "model/probe/frame.h"

namespace memscope::model {

class FrameSink {
 public:
  virtual ~FrameSink() = default;
  virtual void on_frame(const Frame& frame) = 0;
  virtual void on_event(const Event& event) = 0;
  // Events the sink itself raised (a recording that had to wait for the disk), which the source
  // publishes like its own after the step.
  virtual std::vector<Event> take_notices() { return {}; }
};

}  // namespace memscope::model
