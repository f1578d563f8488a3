#include "model/remote/remote_source.h"

#include <poll.h>

#include "model/config/preset.h"

namespace memscope::model {

namespace {

constexpr int kMaxTimelines = 64;  // a run has its main timeline; more from a viewer's view is hostile

std::string run_name(const Endpoint& e) { return "the run at " + e.text(); }

int64_t budget_bytes(const Preset& p) { return static_cast<int64_t>(p.engine.frame_budget_mb * 1024 * 1024); }

// Blocks until all of `bytes` is written or `deadline` (steady seconds) passes.
void write_all(const Socket& s, const std::string& bytes, double deadline, const std::string& where) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = write_some(s.fd(), bytes.data() + at, bytes.size() - at);
    if (n < 0) throw UserError(where + " closed the connection");
    at += static_cast<size_t>(n);
    if (n > 0) continue;
    pollfd p{s.fd(), POLLOUT, 0};
    const double left = deadline - steady_seconds();
    if (left <= 0 || poll(&p, 1, static_cast<int>(left * 1000) + 1) == 0) throw UserError(where + " did not answer in time");
  }
}

}  // namespace

RemoteSource::RemoteSource(AttachOptions options) : TimelineSource(true), options_(std::move(options)) {
  rings_.push_back(std::make_shared<FrameRing>(budget_bytes(preset_)));
  last_step_.push_back(0);
  set_rings(rings_);
  connect();
}

RemoteSource::~RemoteSource() {
  RemoteSource::stop();
  stop_thread();
}

void RemoteSource::connect() {
  const std::string where = run_name(options_.endpoint);
  Socket s = connect_to(options_.endpoint, options_.timeout_s);
  const double deadline = steady_seconds() + options_.timeout_s;
  write_all(s, encode_message(MessageType::Hello, encode_hello({options_.token, options_.client})), deadline, where);
  auto decoder = std::make_unique<WireDecoder>(where);
  char buffer[65536];
  while (!decoder->has_message()) {
    pollfd p{s.fd(), POLLIN, 0};
    const double left = deadline - steady_seconds();
    if (left <= 0 || poll(&p, 1, static_cast<int>(left * 1000) + 1) == 0)
      throw UserError(where + " did not welcome this viewer within " + std::to_string(static_cast<int>(options_.timeout_s)) +
                      " s (is it a memscope run?)");
    const ssize_t n = read_some(s.fd(), buffer, sizeof buffer);
    if (n < 0) throw UserError(where + " closed the connection before its welcome");
    decoder->feed(buffer, static_cast<size_t>(n));
  }
  WireMessage first = decoder->pop();
  if (first.type == MessageType::Refuse) throw UserError(where + " refused this viewer: " + decode_reason(first.payload, where));
  if (first.type == MessageType::Bye) throw UserError(where + " is ending: " + decode_reason(first.payload, where));
  if (first.type != MessageType::Welcome) throw WireError(where + " sent a " + std::string(to_string(first.type)) + " before its welcome");
  const Welcome welcome = decode_welcome(first.payload, where);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // A new connection starts the view over: the run sends what it holds again (and a restarted
    // run is another run).
    for (auto& ring : rings_) ring->truncate_after(0);
    std::fill(last_step_.begin(), last_step_.end(), 0);
    welcome_ = welcome;
    remote_ = RemoteStatus{};
    connected_ = true;
    connection_error_.clear();
    outgoing_.clear();
    sent_seq_ = 0;
  }
  erase_events([](const Event&) { return true; });
  socket_ = std::move(s);
  decoder_ = std::move(decoder);
  while (decoder_->has_message()) on_message(decoder_->pop());
  changed_.notify_all();
}

void RemoteSource::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

void RemoteSource::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.wake();
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  socket_.close();
}

void RemoteSource::lost(const std::string& why) {
  socket_.close();
  decoder_.reset();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Why the view detached stays what the user reads; the retries that fail after it do not
    // replace it (they say less: "cannot connect").
    if (connected_ || connection_error_.empty()) {
      char every[64];
      std::snprintf(every, sizeof every, "; trying to attach again every %g s", options_.retry_s);
      connection_error_ = one_line(why) + every;
    }
    connected_ = false;
  }
  changed_.notify_all();
}

void RemoteSource::loop() {
  std::string pending;  // taken from outgoing_, partly written
  char buffer[65536];
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
    }
    if (!socket_.open()) {
      pending.clear();
      try {
        connect();
      } catch (const UserError& e) {
        lost(e.what());
        pollfd p{wake_.fd(), POLLIN, 0};
        poll(&p, 1, static_cast<int>(options_.retry_s * 1000));
        wake_.drain();
      }
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending += outgoing_;
      outgoing_.clear();
    }
    pollfd fds[2] = {{socket_.fd(), static_cast<short>(POLLIN | (pending.empty() ? 0 : POLLOUT)), 0}, {wake_.fd(), POLLIN, 0}};
    poll(fds, 2, 100);
    if (fds[1].revents) wake_.drain();
    try {
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        for (;;) {
          const ssize_t n = read_some(socket_.fd(), buffer, sizeof buffer);
          if (n < 0) throw UserError(run_name(options_.endpoint) + " closed the connection");
          if (n == 0) break;
          {
            std::lock_guard<std::mutex> lock(mutex_);
            bytes_received_ += n;
          }
          decoder_->feed(buffer, static_cast<size_t>(n));
          while (decoder_ && decoder_->has_message()) on_message(decoder_->pop());
          if (!socket_.open()) break;  // a Bye
        }
      }
      if (socket_.open() && !pending.empty()) {
        const ssize_t n = write_some(socket_.fd(), pending.data(), pending.size());
        if (n < 0) throw UserError(run_name(options_.endpoint) + " closed the connection");
        pending.erase(0, static_cast<size_t>(n));
      }
    } catch (const UserError& e) {
      lost(e.what());
    }
  }
}

void RemoteSource::on_message(WireMessage m) {
  const std::string where = run_name(options_.endpoint);
  switch (m.type) {
    case MessageType::Status: {
      RemoteStatus s = decode_status(m.payload, where);
      Preset parsed;
      bool new_preset = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        new_preset = s.preset_toml != preset_toml_;
      }
      std::string preset_error;
      if (new_preset) {
        try {
          parsed = parse_preset(s.preset_toml, s.preset_name);
        } catch (const UserError& e) {
          preset_error = "the run's preset does not parse here: " + one_line(e.what());
          new_preset = false;
        }
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        remote_ = std::move(s);
        preset_toml_ = remote_.preset_toml;  // one that does not parse is said once, not parsed again
        if (new_preset) {
          preset_ = std::move(parsed);
          for (auto& ring : rings_) ring->set_budget(budget_bytes(preset_));
        }
      }
      if (!preset_error.empty()) emit(source_event(steps().front(), 0, preset_error, EventKind::Error));
      changed_.notify_all();
      return;
    }
    case MessageType::Events:
      for (auto& e : decode_events(m.payload, where)) emit(std::move(e));
      return;
    case MessageType::Frames: on_frames(decode_frames(std::move(m.payload), where)); return;
    case MessageType::Notice: {
      const std::string reason = decode_reason(m.payload, where);
      emit(source_event(steps().front(), 0, reason, EventKind::Error));
      return;
    }
    case MessageType::Bye: lost(where + " ended: " + decode_reason(m.payload, where)); return;
    case MessageType::Refuse: lost(where + " refused this viewer: " + decode_reason(m.payload, where)); return;
    default: throw WireError(where + " sent a " + std::string(to_string(m.type)) + " message, which only a viewer sends");
  }
}

void RemoteSource::on_frames(std::vector<Frame> frames) {
  bool new_timeline = false;
  for (auto& f : frames) {
    if (f.timeline < 0 || f.timeline >= kMaxTimelines)
      throw WireError(run_name(options_.endpoint) + " sent a frame of timeline " + std::to_string(f.timeline));
    const auto t = static_cast<size_t>(f.timeline);
    while (rings_.size() <= t) {
      rings_.push_back(std::make_shared<FrameRing>(budget_bytes(preset_)));
      last_step_.push_back(0);
      new_timeline = true;
    }
    if (f.step <= last_step_[t]) continue;  // sent again when this viewer attached
    last_step_[t] = f.step;
    auto frame = std::make_shared<const Frame>(std::move(f));
    rings_[t]->push(frame);
    emit_frame(*frame);  // the sinks (the GUI's wake-up) hear of it as of a local frame
    std::lock_guard<std::mutex> lock(mutex_);
    ++frames_received_;
  }
  if (new_timeline) set_rings(rings_);
  changed_.notify_all();
}

void RemoteSource::post(Command command) {
  const std::string name = command_name(command.kind);
  std::string refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = welcome_.refused.find(name); it != welcome_.refused.end()) refused = it->second;
    else if (!connected_) refused = "not attached: " + connection_error_;
    else outgoing_ += encode_message(MessageType::Command, encode_command(command, ++sent_seq_));
  }
  if (!refused.empty()) {
    emit(source_event(steps().front(), command.timeline, describe(command) + ": " + refused, EventKind::Error));
    return;
  }
  wake_.wake();
}

bool RemoteSource::idle_locked() const {
  return connected_ && outgoing_.empty() && remote_.commands_taken >= sent_seq_ && remote_.idle;
}

void RemoteSource::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return stopping_ || !connected_ || idle_locked(); });
}

bool RemoteSource::wait_idle_for(double seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, std::chrono::duration<double>(seconds),
                           [&] { return stopping_ || idle_locked(); }) &&
         idle_locked();
}

EngineStatus RemoteSource::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineStatus s;
  s.live = true;
  s.running = connected_ && remote_.running;
  s.idle = !connected_ || idle_locked();
  s.pending_steps = connected_ ? remote_.pending_steps : 0;
  s.steps = remote_.steps;
  s.preset = preset_;
  s.last_error = connected_ ? remote_.last_error : connection_error_;
  s.breakpoints = remote_.breakpoints;
  s.recording = remote_.recording;
  s.busy_since = connected_ && remote_.busy_seconds > 0 ? steady_seconds() - remote_.busy_seconds : 0;
  s.busy_with = remote_.busy_with;
  s.graphs = remote_.graphs;
  s.remote = options_.endpoint.text();
  s.remote_server = welcome_.server;
  s.connected = connected_;
  s.frames_missed = remote_.frames_missed;
  s.events_missed = remote_.events_missed;
  s.refused = welcome_.refused;
  return s;
}

Welcome RemoteSource::welcome() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return welcome_;
}

int64_t RemoteSource::frames_received() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return frames_received_;
}

int64_t RemoteSource::bytes_received() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_received_;
}

Preset RemoteSource::preset() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return preset_;
}

std::vector<int64_t> RemoteSource::steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return remote_.steps;
}

}  // namespace memscope::model
