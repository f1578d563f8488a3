// A min/max summary of a float series for decimation: level k holds, per block of 2^(4+k)
// samples, the smallest and largest finite value with their indices. The extremes of any range
// then come from O(log n) blocks plus at most 15 raw samples at each end, instead of a scan, so
// a plot of a million points decimates in far less than a frame. Series only grow while a model
// runs, so the summary extends in place: appending m samples costs O(m + log n).
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace memscope::viz {

class MinMaxPyramid {
 public:
  // Indices are 32-bit to keep a block at 16 bytes; longer series are decimated by scanning.
  static constexpr std::size_t kMaxSamples = std::numeric_limits<std::uint32_t>::max() - 1;
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  // Indices of the smallest and largest finite sample of a range; kNone when it has none.
  struct Extremes {
    std::size_t lo = kNone, hi = kNone;
  };

  // Summarises ys[0, count) from scratch.
  void rebuild(const float* ys, std::size_t count);
  // Summarises ys[0, count) where ys[0, size()) are the samples summarised before: only the
  // appended samples (and the one partial block per level they touch) are read.
  void extend(const float* ys, std::size_t count);
  std::size_t size() const { return count_; }

  // Finite extremes of ys[begin, end), end <= size(); ys must be the summarised series.
  Extremes extremes(const float* ys, std::size_t begin, std::size_t end) const;

 private:
  struct Block {
    float lo, hi;
    std::uint32_t lo_index, hi_index;  // kEmpty when the block holds no finite sample
  };
  static constexpr int kBaseShift = 4;
  static constexpr std::uint32_t kEmpty = std::numeric_limits<std::uint32_t>::max();

  static Block merge(const Block& a, const Block& b);
  static Block scan(const float* ys, std::size_t begin, std::size_t end);

  std::vector<std::vector<Block>> levels_;  // levels_[0]: blocks of 16 samples; the last level has one block
  std::size_t count_ = 0;
};

}  // namespace memscope::viz
