#include "model/session/session_reader.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "model/probe/frame_json.h"
#include "model/session/frame_chunk.h"
#include "model/session/safetensors_reader.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

constexpr size_t kCachedChunks = 4;
constexpr uint64_t kMaxSessionJson = 64ull << 20;

std::string read_text(const std::filesystem::path& path, uint64_t limit) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw UserError(path.string() + ": cannot read: " + ec.message());
  if (size > limit) throw UserError(path.string() + ": " + std::to_string(size) + " bytes is too large");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) throw UserError(path.string() + ": cannot read");
  return text.str();
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
  load_chunks();
  load_events();
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
  int64_t expected = 0;
  for (const auto& [number, name] : files) {
    for (; expected < number; ++expected) {
      char missing[64];
      std::snprintf(missing, sizeof missing, "frames-%06lld.safetensors", static_cast<long long>(expected));
      damage_.push_back({missing, 0, "missing"});
    }
    expected = number + 1;
    const auto full = dir_ / name;
    try {
      const SafetensorsFile file(full.string());
      std::vector<int64_t> steps;
      std::vector<int32_t> timelines;
      read_chunk_steps(file, steps, timelines);
      SessionChunk c{name, number, static_cast<int64_t>(steps.size()), steps.empty() ? 0 : steps.front(),
                     steps.empty() ? 0 : steps.back(), size_of(full)};
      const auto chunk = static_cast<int32_t>(chunks_.size());
      for (size_t r = 0; r < steps.size(); ++r) {
        if (timelines[r] < 0 || timelines[r] > 4096) throw UserError(full.string() + ": timeline " + std::to_string(timelines[r]) + " is out of range");
        if (static_cast<size_t>(timelines[r]) >= index_.size()) index_.resize(static_cast<size_t>(timelines[r]) + 1);
      }
      for (size_t r = 0; r < steps.size(); ++r) {
        auto& line = index_[static_cast<size_t>(timelines[r])];
        while (!line.empty() && line.back().step >= steps[r]) line.pop_back();  // a rewind re-ran these
        line.push_back({steps[r], chunk, static_cast<int32_t>(r)});
      }
      frame_count_ += c.rows;
      chunks_.push_back(std::move(c));
    } catch (const UserError& e) {
      std::string reason = one_line(e.what());
      const std::string prefix = full.string() + ": ";
      if (reason.rfind(prefix, 0) == 0) reason = reason.substr(prefix.size());
      damage_.push_back({name, size_of(full), reason});
    }
  }
}

void SessionReader::load_events() {
  const auto path = dir_ / "events.jsonl";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    damage_.push_back({"events.jsonl", 0, "missing"});
    return;
  }
  const std::string text = read_text(path, 1ull << 32);
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
  if (info_.closed) {
    loss_.frames_lost = std::max<int64_t>(0, info_.frames - frame_count_);
    for (const auto& [t, last] : info_.last_step)
      if (last > found(t) && (loss_.first_step_lost == 0 || found(t) + 1 < loss_.first_step_lost)) {
        loss_.first_step_lost = found(t) + 1;
        loss_.last_step_lost = std::max(loss_.last_step_lost, last);
      }
    return;
  }
  // Not closed: the frame total is unknown, but events logged past the last chunk bound the loss.
  loss_.frames_lost = -1;
  for (const auto& e : events_)
    if (e.step > found(e.timeline)) {
      if (loss_.first_step_lost == 0 || found(e.timeline) + 1 < loss_.first_step_lost) loss_.first_step_lost = found(e.timeline) + 1;
      loss_.last_step_lost = std::max(loss_.last_step_lost, e.step);
    }
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
