#include "model/session/session_reader.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "model/probe/frame_json.h"
#include "model/session/chunk_order_check.h"
#include "model/session/frame_chunk.h"
#include "model/session/safetensors_reader.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

constexpr size_t kCachedChunks = 4;
constexpr uint64_t kMaxSessionJson = 64ull << 20;

std::string read_text(const std::filesystem::path& path, uint64_t limit) {
  std::error_code ec;
  // A FIFO or a device would block the reader or never end.
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw UserError(path.string() + ": not a regular file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw UserError(path.string() + ": cannot read: " + ec.message());
  if (size > limit) throw UserError(path.string() + ": " + std::to_string(size) + " bytes is too large");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) throw UserError(path.string() + ": cannot read");
  return text.str();
}

// "tensor 'x' fails its checksum (steps 257 to 512 skipped)": the steps from the step column when
// that column is intact.
std::string checksum_damage(const SafetensorsFile& file, const std::vector<std::string>& bad) {
  std::string names;
  for (size_t i = 0; i < bad.size() && i < 3; ++i) names += (i ? ", " : "") + st_quote(bad[i]);
  if (bad.size() > 3) names += " and " + std::to_string(bad.size() - 3) + " more";
  std::string steps = "steps unknown";
  if (std::find(bad.begin(), bad.end(), "step") == bad.end()) {
    try {
      std::vector<int64_t> s;
      std::vector<int32_t> t;
      read_chunk_steps(file, s, t);
      if (!s.empty())
        steps = "steps " + std::to_string(*std::min_element(s.begin(), s.end())) + " to " +
                std::to_string(*std::max_element(s.begin(), s.end()));
    } catch (const UserError&) {
    }
  }
  return std::string(bad.size() == 1 ? "tensor " : "tensors ") + names + (bad.size() == 1 ? " fails its" : " fail their") +
         " CRC32C checksum (the bytes changed after they were written; " + steps + ")";
}

// The rewind markers among the events (each cuts its timeline back to its step at its order),
// in recorded order.
std::vector<RewindMark> rewind_marks(const std::vector<Event>& events) {
  std::vector<RewindMark> marks;
  for (const Event& e : events)
    if (e.kind == EventKind::Command && e.tensor == kRewindMarker && e.order >= 0) marks.push_back({e.order, e.step, e.timeline});
  std::stable_sort(marks.begin(), marks.end(), [](const RewindMark& a, const RewindMark& b) { return a.order < b.order; });
  return marks;
}

uint64_t size_of(const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : size;
}

}  // namespace

SessionReader::SessionReader(const std::string& path) {
  dir_ = path;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_, ec) && std::filesystem::is_directory(dir_.string() + ".memscope", ec))
    dir_ = dir_.string() + ".memscope";
  if (!std::filesystem::is_directory(dir_, ec)) throw UserError(path + ": no such session directory");
  const auto json = dir_ / "session.json";
  if (!std::filesystem::exists(json, ec)) throw UserError(dir_.string() + ": not a session (no session.json)");
  info_ = parse_session_info(read_text(json, kMaxSessionJson), json.string());
  load_events();
  load_chunks();
  build_index();
  account_loss();
}

Preset SessionReader::preset() const { return parse_preset(info_.preset_toml, info_.preset_name); }

void SessionReader::load_chunks() {
  static const std::regex chunk_name(R"(frames-(\d{6,9})\.safetensors)");
  std::vector<std::pair<int64_t, std::string>> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    std::smatch m;
    if (std::regex_match(name, m, chunk_name)) {
      files.emplace_back(std::stoll(m[1].str()), name);
    } else if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      // A chunk (or session.json) the process was writing when it stopped.
      damage_.push_back({name, size_of(entry.path()), "unfinished write (the process stopped before renaming it)"});
    }
  }
  std::sort(files.begin(), files.end());
  // Rewind markers let the columns go back; without every event line they cannot be held to it.
  const bool events_complete = std::none_of(damage_.begin(), damage_.end(), [](const SessionDamage& d) { return d.file == "events.jsonl"; });
  ChunkOrderCheck order(rewind_marks(events_), events_complete, info_.closed ? info_.frames : -1);
  int64_t expected = 0;
  for (const auto& [number, name] : files) {
    if (number > expected) {  // one entry per gap, however wide
      char missing[96];
      if (number == expected + 1)
        std::snprintf(missing, sizeof missing, "frames-%06lld.safetensors", static_cast<long long>(expected));
      else
        std::snprintf(missing, sizeof missing, "frames-%06lld to %06lld.safetensors", static_cast<long long>(expected),
                      static_cast<long long>(number - 1));
      damage_.push_back({missing, 0, "missing"});
    }
    expected = number + 1;
    const auto full = dir_ / name;
    try {
      const SafetensorsFile file(full.string());
      // Every byte is checked now, so that replay and export never meet a damaged chunk later; a
      // damaged one is skipped whole. A chunk with checksums is checked by them (9.6 GB/s); one
      // without (an earlier memscope) is decoded once instead, which finds what structure can.
      if (file.header().checksummed) {
        const std::vector<std::string> bad = file.failing_checksums();
        if (!bad.empty()) throw UserError(full.string() + ": " + checksum_damage(file, bad));
      } else {
        ++unverified_chunks_;
        decode_chunk(file);
      }
      std::vector<int64_t> steps, seqs;
      std::vector<int32_t> timelines;
      read_chunk_steps(file, steps, timelines, &seqs);
      for (size_t r = 0; r < steps.size(); ++r)
        if (timelines[r] < 0 || timelines[r] > 4096)
          throw UserError(full.string() + ": timeline " + std::to_string(timelines[r]) + " is out of range");
      const std::string contradiction = order.accept(number, steps, seqs, timelines);
      if (!contradiction.empty()) throw UserError(full.string() + ": " + contradiction);
      const auto chunk = static_cast<int32_t>(chunks_.size());
      for (size_t r = 0; r < steps.size(); ++r) rows_.push_back({seqs[r], steps[r], timelines[r], chunk, static_cast<int32_t>(r)});
      chunks_.push_back({name, number, static_cast<int64_t>(steps.size()), steps.empty() ? 0 : steps.front(),
                         steps.empty() ? 0 : steps.back(), size_of(full)});
      frame_count_ += static_cast<int64_t>(steps.size());
    } catch (const UserError& e) {
      std::string reason = one_line(e.what());
      const std::string prefix = full.string() + ": ";
      if (reason.rfind(prefix, 0) == 0) reason = reason.substr(prefix.size());
      damage_.push_back({name, size_of(full), reason});
    }
  }
}

void SessionReader::build_index() {
  // Replay the recording's order: frames by seq, and the rewind markers (an event that cuts a
  // timeline back to a step) at the point they were logged.
  std::stable_sort(rows_.begin(), rows_.end(), [](const Row& a, const Row& b) { return a.seq < b.seq; });
  using Cut = RewindMark;  // frames recorded before it; the timeline keeps steps <= step
  const std::vector<Cut> cuts = rewind_marks(events_);
  std::vector<std::vector<Cut>> cuts_by_timeline;  // every truncation, for the events below
  auto line_of = [&](int t) -> std::vector<Location>& {
    if (static_cast<size_t>(t) >= index_.size()) index_.resize(static_cast<size_t>(t) + 1);
    if (static_cast<size_t>(t) >= cuts_by_timeline.size()) cuts_by_timeline.resize(static_cast<size_t>(t) + 1);
    return index_[static_cast<size_t>(t)];
  };
  auto cut = [&](int t, int64_t keep_through, int64_t order) {
    auto& line = line_of(t);
    while (!line.empty() && line.back().step > keep_through) line.pop_back();
    cuts_by_timeline[static_cast<size_t>(t)].push_back({order, keep_through, t});
  };
  size_t next_cut = 0;
  for (const Row& r : rows_) {
    for (; next_cut < cuts.size() && cuts[next_cut].order <= r.seq; ++next_cut)
      cut(cuts[next_cut].timeline, cuts[next_cut].step, cuts[next_cut].order);
    auto& line = line_of(r.timeline);
    // A frame at or before the newest step of its timeline: a rewind re-ran from here.
    if (!line.empty() && line.back().step >= r.step) cut(r.timeline, r.step - 1, r.seq);
    line.push_back({r.step, r.seq, r.chunk, r.row});
  }
  for (; next_cut < cuts.size(); ++next_cut) cut(cuts[next_cut].timeline, cuts[next_cut].step, cuts[next_cut].order);

  // Events of an abandoned future (logged before a cut, at a step after it) go with their frames.
  std::vector<Event> kept;
  for (Event& e : events_) {
    bool stale = false;
    if (e.order >= 0 && e.timeline >= 0 && static_cast<size_t>(e.timeline) < cuts_by_timeline.size())
      for (const Cut& c : cuts_by_timeline[static_cast<size_t>(e.timeline)])
        if (c.order >= e.order && e.step > c.step && !(e.kind == EventKind::Command && e.tensor == kRewindMarker)) {
          stale = true;
          break;
        }
    if (!stale) kept.push_back(std::move(e));
  }
  events_ = std::move(kept);
  rows_.clear();
  rows_.shrink_to_fit();
}

void SessionReader::load_events() {
  const auto path = dir_ / "events.jsonl";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    damage_.push_back({"events.jsonl", 0, "missing"});
    return;
  }
  std::string text;
  try {
    text = read_text(path, 1ull << 32);
  } catch (const UserError& e) {  // not a regular file, unreadable: the frames still read
    damage_.push_back({"events.jsonl", size_of(path), one_line(e.what())});
    return;
  }
  size_t start = 0;
  int64_t line_number = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    ++line_number;
    const bool torn = end == std::string::npos;  // no newline: the last write did not finish
    const std::string line = text.substr(start, torn ? std::string::npos : end - start);
    start = torn ? text.size() : end + 1;
    Event e;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!torn && !j.is_discarded() && event_from_json(j, e)) {
      events_.push_back(std::move(e));
      continue;
    }
    ++loss_.event_lines_skipped;
    damage_.push_back({"events.jsonl", line.size(),
                       torn ? "torn last line " + std::to_string(line_number) + " skipped"
                            : "line " + std::to_string(line_number) + " is not an event, skipped"});
  }
}

void SessionReader::account_loss() {
  loss_.closed = info_.closed;
  for (const auto& d : damage_)
    if (d.file != "events.jsonl") loss_.bytes_lost += d.bytes;
  std::vector<int64_t> last_found(index_.size(), 0);
  for (size_t t = 0; t < index_.size(); ++t)
    if (!index_[t].empty()) last_found[t] = index_[t].back().step;
  auto found = [&](int t) { return static_cast<size_t>(t) < last_found.size() ? last_found[static_cast<size_t>(t)] : 0; };
  auto lost = [&](int64_t from, int64_t to) {
    if (loss_.first_step_lost == 0 || from < loss_.first_step_lost) loss_.first_step_lost = from;
    loss_.last_step_lost = std::max(loss_.last_step_lost, to);
  };
  if (info_.closed) {
    loss_.frames_lost = std::max<int64_t>(0, info_.frames - frame_count_);
    for (const auto& [t, last] : info_.last_step)
      if (last > found(t)) lost(found(t) + 1, last);
    return;
  }
  // Not closed: the frame total is unknown, but events logged past the last chunk bound the loss.
  loss_.frames_lost = -1;
  for (const auto& e : events_)  // commands carry the step they were given at, not one that ran
    if (e.kind != EventKind::Command && e.step > found(e.timeline)) lost(found(e.timeline) + 1, e.step);
}

std::vector<int64_t> SessionReader::steps(int timeline) const {
  std::vector<int64_t> out;
  if (timeline < 0 || timeline >= timelines()) return out;
  for (const auto& l : index_[static_cast<size_t>(timeline)]) out.push_back(l.step);
  return out;
}

std::shared_ptr<const std::vector<Frame>> SessionReader::chunk_frames(size_t chunk) const {
  if (chunk >= chunks_.size()) throw UserError(dir_.string() + ": no chunk " + std::to_string(chunk));
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->first == chunk) {
        cache_.splice(cache_.begin(), cache_, it);
        return cache_.front().second;
      }
  }
  // Decoded outside the lock; the file was checked at open, but may have changed since: errors
  // still come back as UserError naming it.
  const SafetensorsFile file((dir_ / chunks_[chunk].file).string());
  auto frames = std::make_shared<const std::vector<Frame>>(decode_chunk(file));
  if (static_cast<int64_t>(frames->size()) != chunks_[chunk].rows)
    throw UserError(file.path() + ": changed since the session was opened");
  std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.emplace_front(chunk, frames);
  if (cache_.size() > kCachedChunks) cache_.pop_back();
  return frames;
}

Frame SessionReader::frame_at(int timeline, size_t i) const {
  const Location& l = index_.at(static_cast<size_t>(timeline)).at(i);
  return chunk_frames(static_cast<size_t>(l.chunk))->at(static_cast<size_t>(l.row));
}

std::optional<Frame> SessionReader::frame(int timeline, int64_t step) const {
  if (timeline < 0 || timeline >= timelines()) return std::nullopt;
  const auto& line = index_[static_cast<size_t>(timeline)];
  const auto it = std::lower_bound(line.begin(), line.end(), step, [](const Location& l, int64_t s) { return l.step < s; });
  if (it == line.end() || it->step != step) return std::nullopt;
  return frame_at(timeline, static_cast<size_t>(it - line.begin()));
}

}  // namespace memscope::model
