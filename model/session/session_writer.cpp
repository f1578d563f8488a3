#include "model/session/session_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>

#include <nlohmann/json.hpp>

#include "model/probe/frame_json.h"
#include "model/session/safetensors_blob_writer.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string chunk_file_name(int64_t index) {
  char name[64];
  std::snprintf(name, sizeof name, "frames-%06lld.safetensors", static_cast<long long>(index));
  return name;
}

constexpr double kRetrySeconds = 1.0;
constexpr double kWaitNoticeSeconds = 5.0;  // back-pressure notices are summed over this long

}  // namespace

std::filesystem::path session_dir_for(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const std::string suffix = ".memscope";
  if (p.size() >= suffix.size() && p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0) return p;
  return p + suffix;
}

SessionWriter::SessionWriter(const std::filesystem::path& dir, SessionInfo info)
    : dir_(dir), info_(std::move(info)), builder_(info_.record) {
  std::error_code ec;
  if (std::filesystem::exists(dir_, ec) && !std::filesystem::is_empty(dir_, ec))
    throw UserError(dir_.string() + ": already exists and is not empty (a recording never overwrites; pick a new name)");
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw UserError(dir_.string() + ": cannot create the session directory: " + ec.message());
  write_info(false);
  const std::string events = (dir_ / "events.jsonl").string();
  events_fd_ = ::open(events.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (events_fd_ < 0) throw UserError(events + ": cannot open: " + std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

SessionWriter::~SessionWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    std::cerr << "memscope: " << one_line(e.what()) << "\n";
  }
  if (events_fd_ >= 0) ::close(events_fd_);
}

void SessionWriter::write_info(bool closed) {
  info_.closed = closed;
  write_file_atomically(dir_ / "session.json", session_info_json(info_));
}

void SessionWriter::notice(const std::string& message, int64_t step, int timeline) {
  Event e;
  e.kind = EventKind::Error;
  e.step = step;
  e.timeline = timeline;
  e.message = message;
  e.tensor = "recording";
  notices_.push_back(std::move(e));
}

void SessionWriter::on_frame(const Frame& frame) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closing_) throw UserError(dir_.string() + ": the recording is closed");
  const int64_t bytes = frame.bytes();
  queue_.emplace_back(QueuedFrame{frame, frames_enqueued_++, bytes});
  unwritten_bytes_ += bytes;
  info_.last_step[frame.timeline] = frame.step;
  wake_writer_.notify_one();
  // A failed write pauses the engine at once (the frame is queued, not lost): running on would
  // only pile up frames that may never reach the disk.
  if (!error_.empty())
    throw UserError("recording " + dir_.string() + ": " + error_ + "; " + std::to_string(queue_.size()) +
                    " frames are held in memory and retried each second (free space, or stop the recording)");
  const auto budget = static_cast<int64_t>(info_.record.queue_mb * 1024 * 1024);
  if (unwritten_bytes_ <= budget) return;
  // Back-pressure: wait until the writer has drained half the budget, so the engine runs on in
  // bursts rather than one frame per write.
  const double start = now_seconds();
  engine_waiting_ = true;  // the writer then writes what it has instead of waiting for a full chunk
  wake_writer_.notify_one();
  wake_engine_.wait(lock, [&] { return unwritten_bytes_ <= budget / 2 || !error_.empty() || closing_; });
  engine_waiting_ = false;
  const double waited = now_seconds() - start;
  ++stats_.waits;
  stats_.waited_seconds += waited;
  ++waits_since_notice_;
  wait_since_notice_ += waited;
  if (start - last_wait_notice_ >= kWaitNoticeSeconds) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "recording: the disk fell behind; the engine waited %.3f s in %lld waits (no frame was dropped)",
                  wait_since_notice_, static_cast<long long>(waits_since_notice_));
    notice(text, frame.step, frame.timeline);
    last_wait_notice_ = start;
    wait_since_notice_ = 0;
    waits_since_notice_ = 0;
  }
}

void SessionWriter::on_event(const Event& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closing_) return;
  queue_.emplace_back(event);
  std::get<Event>(queue_.back()).order = frames_enqueued_;
  wake_writer_.notify_one();
}

std::vector<Event> SessionWriter::take_notices() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Event> out;
  out.swap(notices_);
  return out;
}

SessionWriterStats SessionWriter::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void SessionWriter::write_event_line(const Event& event) {
  // One write() per line: a killed process leaves at most one torn line, at the end. Text that is
  // not UTF-8 (a file name) is replaced, never thrown on.
  const std::string line = event_to_json(event).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  ssize_t wrote;
  do {
    wrote = ::write(events_fd_, line.data(), line.size());
  } while (wrote < 0 && errno == EINTR);
  const std::string reason = wrote < 0 ? std::strerror(errno) : "short write";
  if (wrote > 0 && wrote < static_cast<ssize_t>(line.size())) {
    // End the torn line, so the next event starts on its own line and reads back.
    [[maybe_unused]] const ssize_t ended = ::write(events_fd_, "\n", 1);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (wrote == static_cast<ssize_t>(line.size())) {
    ++stats_.events;
    event_error_.clear();
    return;
  }
  if (event_error_ != reason)
    notice("recording: cannot write events.jsonl (" + reason + "); events are lost until it works", event.step,
           event.timeline);
  event_error_ = reason;
}

bool SessionWriter::write_chunk() {
  if (builder_.empty()) return true;
  const std::filesystem::path path = dir_ / chunk_file_name(stats_.chunks);
  std::string bytes;
  try {
    bytes = builder_.encode(path.string(), wall_seconds());
    write_file_atomically(path, bytes);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string reason = one_line(e.what());
    if (error_ != reason)
      notice("recording: " + reason + "; the frames are kept and the write is retried each second",
             builder_.last_step(), 0);
    error_ = reason;
    wake_engine_.notify_all();
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_.empty()) notice("recording: writing works again; no frame was lost", builder_.last_step(), 0);
  error_.clear();
  stats_.frames_written += builder_.rows();
  stats_.bytes += static_cast<int64_t>(bytes.size());
  ++stats_.chunks;
  unwritten_bytes_ -= builder_bytes_;
  builder_bytes_ = 0;
  builder_.clear();
  wake_engine_.notify_all();
  return true;
}

void SessionWriter::take(Item& item) {
  if (auto* q = std::get_if<QueuedFrame>(&item)) {
    if (builder_.empty()) chunk_started_ = now_seconds();
    builder_.add(q->frame, q->seq);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      builder_bytes_ += q->bytes;
    }
    if (builder_.rows() >= info_.record.chunk_steps) write_chunk();
  } else {
    write_event_line(std::get<Event>(item));
  }
}

void SessionWriter::run() {
  const double flush_after = info_.record.flush_seconds;
  for (;;) {
    Item item;
    bool have = false, closing = false, hurry = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const double wait = builder_.empty() ? 3600.0 : std::max(0.0, chunk_started_ + flush_after - now_seconds());
      wake_writer_.wait_for(lock, std::chrono::duration<double>(wait),
                            [&] { return !queue_.empty() || closing_ || (engine_waiting_ && !builder_.empty()); });
      closing = closing_;
      // A chunk that cannot be written holds back the queue (nothing is reordered or dropped).
      if (!queue_.empty() && error_.empty()) {
        item = std::move(queue_.front());
        queue_.pop_front();
        have = true;
      }
      // Nothing more to gather now: write the partial chunk when the engine or close() waits on it.
      hurry = queue_.empty() && (engine_waiting_ || closing_);
    }
    try {
      if (have) {
        const auto* q = std::get_if<QueuedFrame>(&item);
        if (q && !builder_.fits(q->frame) && !write_chunk()) {
          std::lock_guard<std::mutex> lock(mutex_);
          queue_.push_front(std::move(item));
          continue;
        }
        take(item);
      }
    } catch (const std::exception& e) {
      // Whatever else goes wrong here (memory) must not end the thread silently: say so and keep
      // the rest going. The item is lost, and the notice says which.
      std::lock_guard<std::mutex> lock(mutex_);
      notice("recording: an item could not be recorded: " + one_line(e.what()), 0, 0);
    }
    bool failing;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failing = !error_.empty();
    }
    if (failing) {
      // Closing makes one last attempt; close() reports what is still unwritten.
      if (!closing) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_writer_.wait_for(lock, std::chrono::duration<double>(kRetrySeconds), [&] { return closing_; });
      }
      if (!write_chunk() && closing) return;
      continue;
    }
    if (!builder_.empty() && (hurry || now_seconds() - chunk_started_ >= flush_after)) write_chunk();
    if (closing) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.empty() && builder_.empty()) return;
    }
  }
}

void SessionWriter::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    closing_ = true;
  }
  wake_writer_.notify_all();
  wake_engine_.notify_all();
  if (thread_.joinable()) thread_.join();
  closed_ = true;
  // The writer thread ends early only when a write still fails while closing.
  int64_t unwritten = builder_.rows();
  for (const auto& item : queue_) {
    if (const Event* e = std::get_if<Event>(&item)) write_event_line(*e);
    else ++unwritten;
  }
  if (unwritten > 0)
    throw UserError("recording " + dir_.string() + ": " + std::to_string(unwritten) + " frames from step " +
                    std::to_string(builder_.first_step()) + " could not be written (" + error_ +
                    "); the session before them is intact");
  queue_.clear();
  // events.jsonl is appended line by line; its lines reach the disk before the totals say closed.
  if (events_fd_ >= 0) (void)::fsync(events_fd_);
  info_.frames = stats_.frames_written;
  info_.chunks = stats_.chunks;
  info_.events = stats_.events;
  write_info(true);
}

}  // namespace memscope::model
