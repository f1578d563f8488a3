#include "model/remote/remote_server.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <random>

namespace memscope::model {

namespace {

constexpr double kStatusEvery = 0.1;  // seconds between status messages
constexpr size_t kFramesPerMessage = 256;
constexpr size_t kEventsPerMessage = 2000;  // well inside max_payload(Events)

double now_s() { return steady_seconds(); }

// Token comparison that takes as long for a near miss as for a wild guess.
bool same_token(const std::string& a, const std::string& b) {
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i)
    diff |= static_cast<unsigned char>(i < a.size() ? a[i] : 0) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
  return diff == 0;
}

}  // namespace

std::string make_token() {
  std::random_device random;
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = random();
    for (int b = 0; b < 8; ++b) token.push_back(hex[word >> (4 * b) & 0xf]);
  }
  return token;
}

struct RemoteServer::Viewer {
  Socket socket;
  std::string peer;
  WireDecoder decoder;
  double connected_at = 0;
  bool authed = false, closing = false;
  // Waiting to be written: control messages (never dropped), then frames (oldest dropped first).
  std::string out;
  size_t out_at = 0;
  std::deque<std::string> control;
  // Encoded only when the socket can take them: a viewer that stalls costs a pointer per frame.
  std::deque<std::shared_ptr<const Frame>> frames;
  std::vector<Event> events;  // not yet sent
  std::string status;         // the newest status, replacing an unsent one
  int64_t frames_missed = 0, events_missed = 0, commands_taken = 0;

  Viewer(Socket s, const std::string& name, double now)
      : socket(std::move(s)), peer(name), decoder("viewer " + name), connected_at(now) {}
  bool idle_output() const { return out_at >= out.size() && control.empty() && frames.empty() && status.empty() && events.empty(); }
};

RemoteServer::RemoteServer(TimelineSource& source, ServeOptions options)
    : source_(source), options_(std::move(options)), endpoint_(options_.endpoint) {
  if (options_.token.empty()) options_.token = make_token();
  listener_ = listen_on(options_.endpoint);
  endpoint_.port = local_port(listener_);
  run_id_ = make_token();
  events_seen_ = static_cast<int64_t>(source_.events().size());
}

RemoteServer::~RemoteServer() { stop(); }

void RemoteServer::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

void RemoteServer::stop(const std::string& reason) {
  if (!thread_.joinable()) return;
  bye_ = reason;
  stopping_ = true;
  wake_.wake();
  thread_.join();
  listener_.close();  // a viewer that tries now is told "cannot connect", not left waiting for a welcome
}

void RemoteServer::on_frame(const Frame& frame) {
  if (viewers_.load() == 0) return;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    inbox_frames_.push_back(std::make_shared<const Frame>(frame));
    if (inbox_frames_.size() > options_.viewer_queue_frames) {
      inbox_frames_.pop_front();
      ++inbox_dropped_;
    }
  }
  wake_.wake();
}

void RemoteServer::on_event(const Event& event) {
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    ++events_seen_;
    if (viewers_.load() == 0) return;
    inbox_events_.push_back(event);
  }
  wake_.wake();
}

void RemoteServer::loop() {
  double last_status = 0;
  double stop_deadline = -1;
  for (;;) {
    const double now = now_s();
    if (stopping_ && stop_deadline < 0) {
      stop_deadline = now + 1.0;  // a moment for the viewers to read their Bye
      for (auto& v : clients_) {
        if (v->authed && !bye_.empty()) v->control.push_back(encode_message(MessageType::Bye, encode_reason(bye_)));
        v->closing = true;
      }
    }
    if (stopping_ && (now > stop_deadline || std::all_of(clients_.begin(), clients_.end(), [](const auto& v) {
                        return v->idle_output();
                      })))
      break;

    // The status is read before the inbox is taken: the source emits a step's frame before it
    // counts the step, so every frame this status counts is then in the inbox, and goes out
    // ahead of it. Read after, a step finished in between would be counted but not yet sent.
    const bool status_due = status_now_ || now - last_status >= kStatusEvery;
    status_now_ = false;
    EngineStatus status;
    if (status_due) status = source_.status();

    // What the source emitted since the last turn.
    std::deque<std::shared_ptr<const Frame>> frames;
    std::vector<Event> events;
    int64_t dropped = 0;
    {
      std::lock_guard<std::mutex> lock(inbox_mutex_);
      frames.swap(inbox_frames_);
      events.swap(inbox_events_);
      std::swap(dropped, inbox_dropped_);
    }
    distribute(std::move(frames), std::move(events), dropped);
    if (status_due) {
      last_status = now;
      for (auto& v : clients_)
        if (v->authed && !v->closing) queue_status(*v, status, now);
    }

    std::vector<pollfd> fds{{listener_.fd(), POLLIN, 0}, {wake_.fd(), POLLIN, 0}};
    for (auto& v : clients_) fds.push_back({v->socket.fd(), static_cast<short>(POLLIN | (v->idle_output() ? 0 : POLLOUT)), 0});
    poll(fds.data(), fds.size(), 50);
    if (fds[1].revents) wake_.drain();
    // The viewers polled; the ones accepted below are read from the next turn.
    const size_t polled = clients_.size();
    if (fds[0].revents & POLLIN && !stopping_) accept_viewers(now);
    for (size_t i = 0; i < clients_.size(); ++i) {
      Viewer& v = *clients_[i];
      const short revents = i < polled ? fds[i + 2].revents : 0;
      try {
        if (revents & (POLLIN | POLLHUP | POLLERR)) read_from(v);
        if (!v.closing && !v.authed && now - v.connected_at > options_.hello_timeout_s)
          throw WireError("viewer " + v.peer + " said no hello within " + std::to_string(options_.hello_timeout_s) + " s");
        write_to(v);
      } catch (const UserError& e) {
        // That viewer alone goes; the run and the other viewers go on.
        std::cerr << "memscope serve: " << one_line(e.what()) << "; closed that connection\n";
        v.socket.close();
      }
    }
    // Closed sockets, and closing viewers that have written everything.
    clients_.erase(std::remove_if(clients_.begin(), clients_.end(),
                                  [&](const std::unique_ptr<Viewer>& v) {
                                    const bool gone = !v->socket.open() || (v->closing && v->idle_output());
                                    if (gone && v->authed) --viewers_;
                                    return gone;
                                  }),
                   clients_.end());
  }
  for (auto& v : clients_)
    if (v->authed) --viewers_;
  clients_.clear();
}

void RemoteServer::accept_viewers(double now) {
  for (;;) {
    Socket s = accept_from(listener_);
    if (!s.open()) return;
    const std::string peer = peer_name(s);
    auto v = std::make_unique<Viewer>(std::move(s), peer, now);
    if (static_cast<int>(clients_.size()) >= options_.max_viewers) {
      v->control.push_back(encode_message(MessageType::Refuse, encode_reason("the run has " + std::to_string(options_.max_viewers) +
                                                                             " viewers already")));
      v->closing = true;
    }
    clients_.push_back(std::move(v));
  }
}

void RemoteServer::read_from(Viewer& v) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = read_some(v.socket.fd(), buffer, sizeof buffer);
    if (n < 0) {
      v.socket.close();  // the viewer went away: nothing to say about it
      return;
    }
    if (n == 0) break;
    v.decoder.feed(buffer, static_cast<size_t>(n));
    while (v.decoder.has_message() && !v.closing) handle(v, v.decoder.pop());
  }
}

void RemoteServer::handle(Viewer& v, WireMessage m) {
  if (!v.authed) {
    if (m.type != MessageType::Hello) throw WireError("viewer " + v.peer + " sent " + to_string(m.type) + " before its hello");
    const Hello hello = decode_hello(m.payload, "viewer " + v.peer);
    if (!same_token(hello.token, options_.token)) {
      std::cerr << "memscope serve: refused viewer " << v.peer << ": wrong token\n";
      v.control.push_back(encode_message(MessageType::Refuse, encode_reason("wrong token: the run printed its token when it "
                                                                            "started (or was given one with --token)")));
      v.closing = true;
      return;
    }
    std::cerr << "memscope serve: viewer " << v.peer << " attached (" << hello.client << ")\n";
    welcome(v);
    return;
  }
  if (m.type != MessageType::Command) throw WireError("viewer " + v.peer + " sent a " + to_string(m.type) + " message");
  take_command(v, m.payload);
}

void RemoteServer::welcome(Viewer& v) {
  Welcome w;
  w.server = options_.server;
  w.run_id = run_id_;
  w.label = options_.label;
  w.refused = options_.refused;
  v.control.push_back(encode_message(MessageType::Welcome, encode_welcome(w)));
  // Read before the rings are copied, so every frame this status counts is among the copies.
  const EngineStatus status = source_.status();
  // Subscribe, then copy the history: what the inbox holds now goes to the other viewers only, and
  // what comes after goes to this one too. Events [0, seen) are in the source's log (emit() hands
  // an event to the sinks just before it logs it); frames may arrive twice, which the viewer drops.
  std::deque<std::shared_ptr<const Frame>> frames;
  std::vector<Event> events;
  int64_t dropped = 0, seen = 0;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    frames.swap(inbox_frames_);
    events.swap(inbox_events_);
    std::swap(dropped, inbox_dropped_);
    ++viewers_;
    seen = events_seen_;
  }
  distribute(std::move(frames), std::move(events), dropped);  // before this viewer counts
  v.authed = true;
  std::vector<Event> history = source_.events();
  for (int i = 0; i < 1000 && static_cast<int64_t>(history.size()) < seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    history = source_.events();
  }
  if (static_cast<int64_t>(history.size()) > seen) history.resize(static_cast<size_t>(seen));
  v.events = std::move(history);
  std::vector<std::shared_ptr<const Frame>> held;
  for (int t = 0; t < source_.timelines(); ++t)
    if (const auto ring = source_.ring(t)) {
      const auto f = ring->frames();
      held.insert(held.end(), f.begin(), f.end());
    }
  v.frames.insert(v.frames.end(), held.begin(), held.end());
  queue_status(v, status, now_s());
}

void RemoteServer::take_command(Viewer& v, const std::string& payload) {
  int64_t seq = 0;
  const Command c = decode_command(payload, "viewer " + v.peer, seq);
  std::string refused;
  if (const auto it = options_.refused.find(command_name(c.kind)); it != options_.refused.end()) refused = it->second;
  Command admitted = c;
  if (refused.empty() && options_.admit) {
    try {
      admitted = options_.admit(c);
    } catch (const UserError& e) {
      refused = one_line(e.what());
    }
  }
  if (refused.empty()) source_.post(admitted);
  else v.control.push_back(encode_message(MessageType::Notice, encode_reason(describe(c) + ": " + refused)));
  v.commands_taken = seq;
  // Its status goes out next turn, read in the loop's order (before the inbox), never here.
  status_now_ = true;
  wake_.wake();
}

void RemoteServer::distribute(std::deque<std::shared_ptr<const Frame>> frames, std::vector<Event> events, int64_t dropped) {
  if (frames.empty() && events.empty() && dropped == 0) return;
  for (auto& v : clients_) {
    if (!v->authed || v->closing) continue;
    v->frames_missed += dropped;
    v->frames.insert(v->frames.end(), frames.begin(), frames.end());
    // A viewer that does not keep up loses its oldest frames, never the newest.
    while (v->frames.size() > options_.viewer_queue_frames) {
      v->frames.pop_front();
      ++v->frames_missed;
    }
    v->events.insert(v->events.end(), events.begin(), events.end());
    if (v->events.size() > options_.viewer_queue_events) {
      const size_t extra = v->events.size() - options_.viewer_queue_events;
      v->events.erase(v->events.begin(), v->events.begin() + static_cast<std::ptrdiff_t>(extra));
      v->events_missed += static_cast<int64_t>(extra);
    }
  }
}

void RemoteServer::queue_status(Viewer& v, const EngineStatus& s, double now) {
  RemoteStatus r;
  r.running = s.running;
  r.idle = s.idle;
  r.pending_steps = s.pending_steps;
  r.steps = s.steps.empty() ? std::vector<int64_t>{0} : s.steps;
  r.preset_name = s.preset.name;
  r.preset_toml = s.preset.toml;
  r.last_error = s.last_error;
  r.breakpoints = s.breakpoints;
  r.recording = s.recording;
  r.busy_seconds = s.busy_since > 0 ? now - s.busy_since : 0;
  r.busy_with = s.busy_with;
  r.graphs = s.graphs;
  r.commands_taken = v.commands_taken;
  r.frames_missed = v.frames_missed;
  r.events_missed = v.events_missed;
  v.status = encode_message(MessageType::Status, encode_status(r));
}

void RemoteServer::write_to(Viewer& v) {
  while (v.socket.open()) {
    if (v.out_at >= v.out.size()) {
      // Next: control messages, then the events, the frames, and last the newest status (sent after
      // the frames it counts, so a viewer that waits for a step finds its frame already there).
      v.out.clear();
      v.out_at = 0;
      if (!v.control.empty()) {
        v.out = std::move(v.control.front());
        v.control.pop_front();
      } else if (!v.events.empty()) {
        const size_t n = std::min(v.events.size(), kEventsPerMessage);
        const std::vector<Event> part(v.events.begin(), v.events.begin() + static_cast<std::ptrdiff_t>(n));
        v.out = encode_message(MessageType::Events, encode_events(part));
        v.events.erase(v.events.begin(), v.events.begin() + static_cast<std::ptrdiff_t>(n));
      } else if (!v.frames.empty()) {
        std::vector<std::shared_ptr<const Frame>> part;
        while (!v.frames.empty() && part.size() < kFramesPerMessage) {
          part.push_back(std::move(v.frames.front()));
          v.frames.pop_front();
        }
        for (const auto& payload : encode_frames(part)) v.out += encode_message(MessageType::Frames, payload);
      } else if (!v.status.empty()) {
        v.out = std::move(v.status);
        v.status.clear();
      } else {
        return;
      }
    }
    const ssize_t n = write_some(v.socket.fd(), v.out.data() + v.out_at, v.out.size() - v.out_at);
    if (n < 0) {
      v.socket.close();
      return;
    }
    if (n == 0) return;  // the socket's buffer is full: poll says when to go on
    v.out_at += static_cast<size_t>(n);
  }
}

}  // namespace memscope::model
