#include "model/probe/snapshot_buffers.h"

#include <algorithm>

namespace memscope::model {

std::vector<float> SnapshotBuffers::take(std::size_t floats) {
  ++taken_[floats];
  const auto found = ready_.find(floats);
  if (found == ready_.end() || found->second.empty()) return std::vector<float>(floats);
  std::vector<float> out = std::move(found->second.back());
  found->second.pop_back();
  return out;
}

void SnapshotBuffers::frame_done() {
  wanted_ = std::move(taken_);
  taken_.clear();
  // Beyond what the frame took (sizes no snapshot takes any more: another model, other knobs) is
  // let go.
  for (auto it = ready_.begin(); it != ready_.end();) {
    const auto wanted = wanted_.find(it->first);
    if (wanted == wanted_.end()) {
      it = ready_.erase(it);
    } else {
      if (it->second.size() > wanted->second) it->second.resize(wanted->second);
      ++it;
    }
  }
}

void SnapshotBuffers::prepare(int64_t frames_left) {
  std::size_t missing = 0;
  for (const auto& [floats, count] : wanted_) missing += count - std::min(count, ready_[floats].size());
  if (missing == 0) return;
  const std::size_t frames = static_cast<std::size_t>(std::max<int64_t>(frames_left, 1));
  std::size_t make = std::max<std::size_t>(1, (missing + frames - 1) / frames);  // this frame's share
  for (const auto& [floats, count] : wanted_) {
    auto& ready = ready_[floats];
    while (make > 0 && ready.size() < count) {
      ready.emplace_back(floats);  // value-initialised: every page written now, not when it is taken
      --make;
    }
  }
}

std::size_t SnapshotBuffers::ready() const {
  std::size_t total = 0;
  for (const auto& [floats, buffers] : ready_) total += buffers.size();
  return total;
}

}  // namespace memscope::model
