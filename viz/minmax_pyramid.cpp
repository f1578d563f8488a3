#include "viz/minmax_pyramid.h"

#include <algorithm>
#include <cmath>

namespace memscope::viz {

MinMaxPyramid::Block MinMaxPyramid::merge(const Block& a, const Block& b) {
  if (a.lo_index == kEmpty) return b;
  if (b.lo_index == kEmpty) return a;
  // Ties go to the earlier sample, as a left-to-right scan picks them: both paths draw the same.
  Block out = a;
  if (b.lo < a.lo || (b.lo == a.lo && b.lo_index < a.lo_index)) out.lo = b.lo, out.lo_index = b.lo_index;
  if (b.hi > a.hi || (b.hi == a.hi && b.hi_index < a.hi_index)) out.hi = b.hi, out.hi_index = b.hi_index;
  return out;
}

MinMaxPyramid::Block MinMaxPyramid::scan(const float* ys, std::size_t begin, std::size_t end) {
  Block out{0.0f, 0.0f, kEmpty, kEmpty};
  for (std::size_t i = begin; i < end; ++i) {
    const float y = ys[i];
    if (!std::isfinite(y)) continue;
    const auto index = static_cast<std::uint32_t>(i);
    if (out.lo_index == kEmpty) out = {y, y, index, index};
    if (y < out.lo) out.lo = y, out.lo_index = index;
    if (y > out.hi) out.hi = y, out.hi_index = index;
  }
  return out;
}

void MinMaxPyramid::rebuild(const float* ys, std::size_t count) {
  levels_.clear();
  count_ = 0;
  extend(ys, count);
}

void MinMaxPyramid::extend(const float* ys, std::size_t count) {
  if (count <= count_) return;
  // The first block at each level whose samples changed: the partial block the old data ended in.
  std::size_t dirty = count_ >> kBaseShift;
  const std::size_t base_blocks = (count + (std::size_t{1} << kBaseShift) - 1) >> kBaseShift;
  if (levels_.empty()) levels_.emplace_back();
  levels_[0].resize(base_blocks);
  for (std::size_t b = dirty; b < base_blocks; ++b)
    levels_[0][b] = scan(ys, b << kBaseShift, std::min(count, (b + 1) << kBaseShift));
  for (std::size_t k = 1; levels_[k - 1].size() > 1; ++k) {
    if (levels_.size() == k) levels_.emplace_back();
    const auto& below = levels_[k - 1];
    auto& level = levels_[k];
    dirty >>= 1;
    level.resize((below.size() + 1) / 2);
    for (std::size_t b = dirty; b < level.size(); ++b)
      level[b] = 2 * b + 1 < below.size() ? merge(below[2 * b], below[2 * b + 1]) : below[2 * b];
  }
  count_ = count;
}

MinMaxPyramid::Extremes MinMaxPyramid::extremes(const float* ys, std::size_t begin, std::size_t end) const {
  // Whole base blocks [first, last) come from the pyramid, the ragged ends from the samples.
  std::size_t first = (begin + (std::size_t{1} << kBaseShift) - 1) >> kBaseShift, last = end >> kBaseShift;
  Block acc{0.0f, 0.0f, kEmpty, kEmpty};
  if (first >= last) {
    acc = scan(ys, begin, end);
  } else {
    acc = merge(scan(ys, begin, first << kBaseShift), scan(ys, last << kBaseShift, end));
    // Bottom-up cover of [first, last): an odd edge block is taken whole, then both edges climb a level.
    for (std::size_t k = 0; first < last; ++k, first >>= 1, last >>= 1) {
      if (first & 1) acc = merge(acc, levels_[k][first++]);
      if (last & 1) acc = merge(acc, levels_[k][--last]);
    }
  }
  if (acc.lo_index == kEmpty) return {};
  return {acc.lo_index, acc.hi_index};
}

}  // namespace memscope::viz
