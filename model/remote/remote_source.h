// RemoteSource: a run in another process, attached over the wire (issue 22), shown by the GUI as
// if it were local. It is a TimelineSource whose thread is a network loop rather than a stepper:
// frames land in its rings and events in its log as they arrive, the run's status is its status,
// and post() sends the command to the run.
//
// What the run refuses from a viewer (rewind, fork: the run and its history belong to the other
// process) is in status().refused with the reason, and refused here without a round trip. When the
// connection drops the view stays, the status says why, and the source reconnects every second;
// a run that serves again (the trainer restarted) starts the view over.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/engine/timeline_source.h"
#include "model/remote/socket.h"
#include "model/remote/wire_messages.h"

namespace memscope::model {

struct AttachOptions {
  Endpoint endpoint;
  std::string token;
  std::string client = "memscope";  // says who attached, in the run's log
  double retry_s = 1.0;             // between reconnection attempts
  double timeout_s = 5.0;           // for connecting and for the run's welcome
};

class RemoteSource : public TimelineSource {
 public:
  // Connects and says hello now: nobody listening, a wrong token or another wire version throws
  // UserError with one line that says which.
  explicit RemoteSource(AttachOptions options);
  ~RemoteSource() override;

  void start() override;
  void stop() override;
  void post(Command command) override;
  // Until the run has taken every command sent and is paused; returns early when disconnected.
  void wait_idle() override;
  bool wait_idle_for(double seconds) override;
  EngineStatus status() const override;

  Welcome welcome() const;
  // The frames and bytes received so far (the bench's latency and throughput figures).
  int64_t frames_received() const;
  int64_t bytes_received() const;

 protected:
  std::vector<Event> step() override { return {}; }  // never called: start() runs the network loop
  void apply(const Command&, std::vector<Event>&) override {}
  Preset preset() const override;
  std::vector<int64_t> steps() const override;

 private:
  void loop();
  // Connects, says hello and reads the welcome; throws UserError when refused or unreachable.
  void connect();
  void on_message(WireMessage message);
  void on_frames(std::vector<Frame> frames);
  void lost(const std::string& why);  // the connection ended: keep the view, say why, retry
  bool idle_locked() const;

  AttachOptions options_;
  Socket socket_;
  std::unique_ptr<WireDecoder> decoder_;
  WakePipe wake_;
  std::thread thread_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false, connected_ = false;
  std::string connection_error_;  // why the connection is down ("" while connected)
  Welcome welcome_;
  RemoteStatus remote_;
  Preset preset_;
  std::string preset_toml_;  // as the run sent it: parsed again only when it changes
  std::string outgoing_;  // encoded commands not yet written
  int64_t sent_seq_ = 0;
  std::vector<std::shared_ptr<FrameRing>> rings_;  // the network thread's; published with set_rings
  std::vector<int64_t> last_step_;                 // per timeline: frames at or before it are repeats
  int64_t frames_received_ = 0, bytes_received_ = 0;
};

}  // namespace memscope::model
