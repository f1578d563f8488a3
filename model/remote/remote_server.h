// RemoteServer: a timeline source served to viewers in other processes (issue 22), the way a
// profiled program serves Tracy. It is a FrameSink of the source: frames and events go out to every
// attached viewer, commands come in and are posted to the source, and the status goes out ten
// times a second.
//
// The source never waits on a viewer (DESIGN principle 2). on_frame only copies the frame into a
// bounded inbox; one server thread encodes and writes with non-blocking sockets. A viewer that
// falls behind loses its oldest frames (counted, and told in its status), never a recording's. A
// viewer that dies, stalls or sends a malformed message is closed alone.
#pragma once
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/engine/timeline_source.h"
#include "model/remote/socket.h"
#include "model/remote/wire_messages.h"

namespace memscope::model {

struct ServeOptions {
  Endpoint endpoint{"127.0.0.1", 0};
  std::string token;   // a viewer must send it; make_token() when the user gives none
  std::string server;  // "memscope-cli train (pid 1234)"
  std::string label;   // "train demo-mqar"
  // Commands refused from viewers, by command_name(), with the reason shown to the user.
  std::map<std::string, std::string> refused;
  // On the server thread, for each command not refused above: returns the command to post (a
  // training run clamps Run and Step to its budget) or throws UserError to refuse it.
  std::function<Command(const Command&)> admit;
  size_t viewer_queue_frames = 2048;  // frames waiting for one viewer before its oldest are dropped
  size_t viewer_queue_events = 20000;
  int max_viewers = 8;
  double hello_timeout_s = 5.0;  // a connection that has not said a valid hello by then is closed
};

// 128 random bits as 32 hex digits.
std::string make_token();

class RemoteServer : public FrameSink {
 public:
  // Binds now: a port in use or a bad address throws UserError here. Add it to the source's sinks
  // before the source starts, then start() it.
  RemoteServer(TimelineSource& source, ServeOptions options);
  ~RemoteServer() override;

  void start();
  // Says `reason` to every viewer (a Bye; "" closes without one), gives them a moment to read it,
  // and joins. Call it before the source is destroyed.
  void stop(const std::string& reason = "");

  const Endpoint& endpoint() const { return endpoint_; }  // with the port actually bound
  const std::string& token() const { return options_.token; }
  int viewers() const { return viewers_.load(); }  // connected and past the token check

  void on_frame(const Frame& frame) override;
  void on_event(const Event& event) override;

 private:
  struct Viewer;
  void loop();
  void accept_viewers(double now);
  void read_from(Viewer& v);
  void handle(Viewer& v, WireMessage message);
  void welcome(Viewer& v);
  void take_command(Viewer& v, const std::string& payload);
  // To every viewer past its hello; `dropped`: frames the inbox lost, which each of them missed.
  void distribute(std::deque<std::shared_ptr<const Frame>> frames, std::vector<Event> events, int64_t dropped);
  void queue_status(Viewer& v, const EngineStatus& status, double now);
  void write_to(Viewer& v);

  TimelineSource& source_;
  ServeOptions options_;
  Endpoint endpoint_;
  Socket listener_;
  WakePipe wake_;
  std::string run_id_;
  std::vector<std::unique_ptr<Viewer>> clients_;  // the server thread's
  std::atomic<int> viewers_{0};
  std::atomic<bool> stopping_{false};
  std::string bye_;
  std::thread thread_;
  bool status_now_ = false;  // the server thread's: a command was taken, so a status goes out next turn

  // Handed from the source's thread to the server thread.
  std::mutex inbox_mutex_;
  std::deque<std::shared_ptr<const Frame>> inbox_frames_;
  std::vector<Event> inbox_events_;
  int64_t inbox_dropped_ = 0;  // frames the inbox itself dropped (the server thread fell behind)
  int64_t events_seen_ = 0;    // every event the source emitted since the server was added
};

}  // namespace memscope::model
