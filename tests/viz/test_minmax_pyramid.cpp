// The min/max summary must give exactly a scan's extremes for any range, however it was grown.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "viz/decimate.h"
#include "viz/minmax_pyramid.h"

using memscope::viz::MinMaxPyramid;

namespace {

// Brute force: earliest smallest and earliest largest finite sample of ys[begin, end).
MinMaxPyramid::Extremes scan(const std::vector<float>& ys, std::size_t begin, std::size_t end) {
  MinMaxPyramid::Extremes e;
  for (std::size_t i = begin; i < end; ++i) {
    if (!std::isfinite(ys[i])) continue;
    if (e.lo == MinMaxPyramid::kNone || ys[i] < ys[e.lo]) e.lo = i;
    if (e.hi == MinMaxPyramid::kNone || ys[i] > ys[e.hi]) e.hi = i;
  }
  return e;
}

// Noise with ties (values rounded to 1/8), non-finite samples and a non-finite run of 300.
std::vector<float> awkward(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 4.0f);
  std::uniform_int_distribution<int> pick(0, 39);
  std::vector<float> ys(n);
  for (auto& y : ys) {
    const int p = pick(rng);
    y = p == 0 ? std::numeric_limits<float>::quiet_NaN() : p == 1 ? INFINITY : std::round(noise(rng) * 8.0f) / 8.0f;
  }
  for (std::size_t i = n / 2; i < std::min(n, n / 2 + 300); ++i) ys[i] = -INFINITY;
  return ys;
}

void check_ranges(const MinMaxPyramid& pyramid, const std::vector<float>& ys, std::size_t count, std::mt19937& rng) {
  std::uniform_int_distribution<std::size_t> at(0, count);
  for (int r = 0; r < 300; ++r) {
    std::size_t a = at(rng), b = at(rng);
    if (a > b) std::swap(a, b);
    if (r % 3 == 0) b = std::min(count, a + r % 40);  // short ranges, inside one or two blocks
    const auto want = scan(ys, a, b), got = pyramid.extremes(ys.data(), a, b);
    REQUIRE(got.lo == want.lo);
    REQUIRE(got.hi == want.hi);
  }
}

}  // namespace

TEST_CASE("pyramid extremes equal a scan's for any range, built at once or grown in chunks", "[viz]") {
  const std::vector<float> ys = awkward(70'000, 12);
  std::mt19937 rng(4);
  SECTION("built at once") {
    MinMaxPyramid pyramid;
    pyramid.rebuild(ys.data(), ys.size());
    CHECK(pyramid.size() == ys.size());
    check_ranges(pyramid, ys, ys.size(), rng);
  }
  SECTION("grown by chunks of 1 to 5000 samples, across block edges at every level") {
    MinMaxPyramid pyramid;
    const std::size_t chunks[] = {1, 1, 14, 16, 17, 31, 33, 64, 1, 255, 1000, 5000, 3, 4096, 2};
    std::size_t count = 0;
    for (int round = 0; count < ys.size(); ++round) {
      count = std::min(ys.size(), count + chunks[round % 15]);
      pyramid.extend(ys.data(), count);
      REQUIRE(pyramid.size() == count);
      if (round % 4 == 0 || count == ys.size()) check_ranges(pyramid, ys, count, rng);
    }
  }
  SECTION("a range of non-finite samples only has no extremes") {
    MinMaxPyramid pyramid;
    pyramid.rebuild(ys.data(), ys.size());
    const auto e = pyramid.extremes(ys.data(), ys.size() / 2, ys.size() / 2 + 300);
    CHECK(e.lo == MinMaxPyramid::kNone);
    CHECK(e.hi == MinMaxPyramid::kNone);
  }
}

TEST_CASE("follow mode: a series growing every frame decimates through its extended summary as a scan does", "[viz]") {
  std::vector<float> ys = awkward(20'000, 3);
  std::vector<double> xs;
  for (std::size_t i = 0; i < ys.size(); ++i) xs.push_back(static_cast<double>(i) * 2.0 + (i > 9'000 ? 500.0 : 0.0));
  MinMaxPyramid pyramid;
  for (std::size_t count = 15'000; count <= ys.size(); count += 997) {
    pyramid.extend(ys.data(), count);
    const double x_min = xs[0], x_max = xs[count - 1];
    const auto scanned = memscope::viz::decimate_minmax(xs.data(), ys.data(), count, x_min, x_max, 333);
    const auto summarised = memscope::viz::decimate_minmax(xs.data(), ys.data(), count, x_min, x_max, 333, pyramid);
    REQUIRE(summarised.size() == scanned.size());
    for (std::size_t k = 0; k < scanned.size(); ++k) {
      REQUIRE(summarised[k].x == scanned[k].x);
      REQUIRE(summarised[k].y == scanned[k].y);
    }
  }
}
