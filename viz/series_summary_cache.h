// Min/max summaries of the series line plots draw, kept across frames so that a plot in follow
// mode only summarises the samples appended since the last frame.
//
// Plots receive raw pointers every frame, so a series is known by a key (line_plot: the plot's
// ImGui id and the series' index) and checked before its summary is trusted. The rule:
// a summary of n samples is extended to the new count only when the key and the caller's
// revision are the same, count >= n, and the samples it recorded at a few positions (the first,
// the last of the n, six evenly between) are bit for bit the same; otherwise it is rebuilt.
// So appending, with or without the vector moving, reuses it; a rewind (the series shrinks or its
// newest summarised sample changes) or a different series rebuilds it. A caller that rewrites
// samples without changing the count and those positions must bump its revision.
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "viz/minmax_pyramid.h"

namespace memscope::viz {

class SeriesSummaryCache {
 public:
  enum class Use { reused, extended, rebuilt };

  // The summary of ys[0, count) for the series called `key`; `frame` is a clock for forget().
  const MinMaxPyramid& summary(std::uint64_t key, const float* ys, std::size_t count, std::uint64_t revision,
                               long frame);
  // Drops the summaries not asked for since `frame` (plots no longer drawn).
  void forget_unused_since(long frame);

  std::size_t size() const { return entries_.size(); }
  Use last_use() const { return last_use_; }  // how the last summary() call was served

 private:
  struct Spot {
    std::size_t index;
    std::uint32_t bits;  // the sample's bits: NaN compares equal to itself
  };
  struct Entry {
    MinMaxPyramid pyramid;
    std::uint64_t revision = 0;
    std::vector<Spot> spots;
    long last_frame = 0;
  };
  static bool same_samples(const Entry& entry, const float* ys, std::size_t count);
  static void record_spots(Entry& entry, const float* ys, std::size_t count);

  std::unordered_map<std::uint64_t, Entry> entries_;
  Use last_use_ = Use::rebuilt;
};

}  // namespace memscope::viz
