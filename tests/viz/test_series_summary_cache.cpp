// A plot's summary is reused only for the same series grown by appending; anything else rebuilds.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "viz/series_summary_cache.h"

using memscope::viz::MinMaxPyramid;
using memscope::viz::SeriesSummaryCache;
using Use = SeriesSummaryCache::Use;

namespace {
std::vector<float> noise(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> ys(n);
  for (auto& y : ys) y = d(rng);
  return ys;
}
}  // namespace

TEST_CASE("summary cache: appends extend, rewinds, replacements and revisions rebuild", "[viz]") {
  SeriesSummaryCache cache;
  std::vector<float> ys = noise(10'000, 1);
  cache.summary(7, ys.data(), ys.size(), 0, 1);
  CHECK(cache.last_use() == Use::rebuilt);
  cache.summary(7, ys.data(), ys.size(), 0, 2);
  CHECK(cache.last_use() == Use::reused);

  SECTION("appending, even when the vector moves, extends") {
    ys.push_back(5.0f);
    ys.shrink_to_fit();
    std::vector<float> moved = ys;  // another address, same samples
    const MinMaxPyramid& summary = cache.summary(7, moved.data(), moved.size(), 0, 3);
    CHECK(cache.last_use() == Use::extended);
    CHECK(summary.size() == moved.size());
    CHECK(summary.extremes(moved.data(), 0, moved.size()).hi == moved.size() - 1);
  }
  SECTION("a shorter series (a rewind) rebuilds") {
    cache.summary(7, ys.data(), 4'000, 0, 3);
    CHECK(cache.last_use() == Use::rebuilt);
  }
  SECTION("a rewind re-run past the old count changes the newest summarised sample and rebuilds") {
    ys[9'999] += 1.0f;
    ys.push_back(0.0f);
    cache.summary(7, ys.data(), ys.size(), 0, 3);
    CHECK(cache.last_use() == Use::rebuilt);
  }
  SECTION("another series of the same length rebuilds") {
    const std::vector<float> other = noise(10'000, 2);
    cache.summary(7, other.data(), other.size(), 0, 3);
    CHECK(cache.last_use() == Use::rebuilt);
  }
  SECTION("a new revision rebuilds even when the checked samples agree") {
    ys[5'001] = 100.0f;  // not a checked position
    const MinMaxPyramid& summary = cache.summary(7, ys.data(), ys.size(), 1, 3);
    CHECK(cache.last_use() == Use::rebuilt);
    CHECK(summary.extremes(ys.data(), 0, ys.size()).hi == 5'001);
  }
  SECTION("keys are separate and unused summaries are forgotten") {
    cache.summary(8, ys.data(), ys.size(), 0, 10);
    CHECK(cache.last_use() == Use::rebuilt);
    CHECK(cache.size() == 2);
    cache.forget_unused_since(5);
    CHECK(cache.size() == 1);
    cache.summary(7, ys.data(), ys.size(), 0, 11);
    CHECK(cache.last_use() == Use::rebuilt);
  }
}
