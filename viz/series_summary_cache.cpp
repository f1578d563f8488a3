#include "viz/series_summary_cache.h"

#include <cstring>
#include <iterator>

namespace memscope::viz {
namespace {

std::uint32_t bits_of(float y) {
  std::uint32_t bits;
  std::memcpy(&bits, &y, sizeof bits);
  return bits;
}

}  // namespace

bool SeriesSummaryCache::same_samples(const Entry& entry, const float* ys, std::size_t count) {
  if (count < entry.pyramid.size()) return false;
  for (const Spot& spot : entry.spots)
    if (bits_of(ys[spot.index]) != spot.bits) return false;
  return true;
}

void SeriesSummaryCache::record_spots(Entry& entry, const float* ys, std::size_t count) {
  entry.spots.clear();
  if (count == 0) return;
  constexpr std::size_t kBetween = 6;
  for (std::size_t k = 0; k <= kBetween + 1; ++k) {
    const std::size_t index = (count - 1) * k / (kBetween + 1);
    if (entry.spots.empty() || entry.spots.back().index != index) entry.spots.push_back({index, bits_of(ys[index])});
  }
}

const MinMaxPyramid& SeriesSummaryCache::summary(std::uint64_t key, const float* ys, std::size_t count,
                                                 std::uint64_t revision, long frame) {
  auto [it, inserted] = entries_.try_emplace(key);
  Entry& entry = it->second;
  entry.last_frame = frame;
  if (!inserted && entry.revision == revision && same_samples(entry, ys, count)) {
    if (count == entry.pyramid.size()) {
      last_use_ = Use::reused;
      return entry.pyramid;
    }
    entry.pyramid.extend(ys, count);
    last_use_ = Use::extended;
  } else {
    entry.pyramid.rebuild(ys, count);
    entry.revision = revision;
    last_use_ = Use::rebuilt;
  }
  record_spots(entry, ys, count);
  return entry.pyramid;
}

void SeriesSummaryCache::forget_unused_since(long frame) {
  for (auto it = entries_.begin(); it != entries_.end();)
    it = it->second.last_frame < frame ? entries_.erase(it) : std::next(it);
}

}  // namespace memscope::viz
