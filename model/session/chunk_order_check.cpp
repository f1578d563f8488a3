#include "model/session/chunk_order_check.h"

#include <algorithm>

namespace memscope::model {

ChunkOrderCheck::ChunkOrderCheck(std::vector<RewindMark> marks, bool marks_complete, int64_t frames)
    : marks_(std::move(marks)), marks_complete_(marks_complete), frames_(frames) {
  std::stable_sort(marks_.begin(), marks_.end(), [](const RewindMark& a, const RewindMark& b) { return a.order < b.order; });
}

void ChunkOrderCheck::apply_marks_before(int64_t seq, std::map<int, Newest>& newest, size_t& next_mark) const {
  for (; next_mark < marks_.size() && marks_[next_mark].order <= seq; ++next_mark) {
    const RewindMark& m = marks_[next_mark];
    auto it = newest.find(m.timeline);
    if (it != newest.end() && it->second.step > m.step) it->second = {m.step, m.order - 1};
  }
}

bool ChunkOrderCheck::rerun_explained(int timeline, int64_t seq, int64_t step) const {
  // The next marker of this timeline after the frame: a rewind whose re-run made it.
  for (const RewindMark& m : marks_)
    if (m.timeline == timeline && m.order > seq) return m.step >= step;
  return false;
}

std::string ChunkOrderCheck::accept(int64_t number, const std::vector<int64_t>& steps, const std::vector<int64_t>& seqs,
                                    const std::vector<int32_t>& timelines) {
  const size_t rows = steps.size();
  if (rows == 0) return "";
  auto row = [](size_t r) { return "row " + std::to_string(r); };
  if (seqs[0] < number)
    return "seq starts at " + std::to_string(seqs[0]) + ", before the chunk's place in the recording (" +
           std::to_string(number) + " chunks come before it)";
  if (seqs[0] <= last_seq_)
    return "seq starts at " + std::to_string(seqs[0]) + ", not after the previous chunk's " + std::to_string(last_seq_);
  for (size_t r = 1; r < rows; ++r)
    if (seqs[r] != seqs[r - 1] + 1)
      return "seq is not consecutive at " + row(r) + " (" + std::to_string(seqs[r - 1]) + " then " + std::to_string(seqs[r]) + ")";
  if (frames_ >= 0 && seqs[rows - 1] >= frames_)
    return "seq " + std::to_string(seqs[rows - 1]) + " is past the session's " + std::to_string(frames_) + " frames";

  std::map<int, Newest> newest = newest_;
  size_t next_mark = next_mark_;
  for (size_t r = 0; r < rows; ++r) {
    const int64_t step = steps[r], seq = seqs[r];
    const int t = timelines[r];
    if (step < 0 || step > kMaxStep) return "step " + std::to_string(step) + " at " + row(r) + " is out of range";
    apply_marks_before(seq, newest, next_mark);
    const auto it = newest.find(t);
    if (it != newest.end()) {
      const Newest& n = it->second;
      if (step > n.step && step - n.step > seq - n.seq)
        return "step " + std::to_string(step) + " at " + row(r) + " runs " + std::to_string(step - n.step) +
               " steps ahead of timeline " + std::to_string(t) + "'s step " + std::to_string(n.step) + " within " +
               std::to_string(seq - n.seq) + " frames";
      if (step <= n.step && marks_complete_ && !rerun_explained(t, seq, step))
        return "step " + std::to_string(step) + " at " + row(r) + " goes back from timeline " + std::to_string(t) +
               "'s step " + std::to_string(n.step) + " with no rewind to explain it";
    }
    newest[t] = {step, seq};
  }
  newest_ = std::move(newest);
  next_mark_ = next_mark;
  last_seq_ = seqs[rows - 1];
  return "";
}

}  // namespace memscope::model
