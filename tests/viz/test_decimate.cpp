// Min/max decimation must keep what a user looks for in a plot: extremes, spikes, the ends.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "viz/decimate.h"

using memscope::viz::decimate_minmax;

namespace {
struct Series {
  std::vector<double> xs;
  std::vector<float> ys;
};
Series noisy(std::size_t n, unsigned seed) {
  Series s;
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) s.xs.push_back(static_cast<double>(i)), s.ys.push_back(noise(rng));
  return s;
}
}  // namespace

TEST_CASE("a million points decimate to a few per pixel column and keep each column's extremes", "[viz]") {
  Series s = noisy(1'000'000, 7);
  const int columns = 800;
  auto out = decimate_minmax(s.xs.data(), s.ys.data(), s.xs.size(), 0.0, 999'999.0, columns);
  CHECK(out.size() <= static_cast<std::size_t>(columns) * 4 + 2);
  CHECK(out.size() >= static_cast<std::size_t>(columns) * 2);
  // Independent check: brute-force min and max of every column appear in the output.
  const double width = 999'999.0 / columns;
  std::vector<float> lo(columns + 1, INFINITY), hi(columns + 1, -INFINITY), out_lo(columns + 1, INFINITY),
      out_hi(columns + 1, -INFINITY);
  for (std::size_t i = 0; i < s.xs.size(); ++i) {
    const int c = static_cast<int>(std::floor(s.xs[i] / width));
    lo[c] = std::min(lo[c], s.ys[i]), hi[c] = std::max(hi[c], s.ys[i]);
  }
  for (const auto& p : out) {
    const int c = static_cast<int>(std::floor(p.x / width));
    out_lo[c] = std::min(out_lo[c], p.y), out_hi[c] = std::max(out_hi[c], p.y);
  }
  CHECK(out_lo == lo);
  CHECK(out_hi == hi);
  // x order is kept.
  for (std::size_t i = 1; i < out.size(); ++i) REQUIRE(out[i - 1].x <= out[i].x);
}

TEST_CASE("a one-sample spike survives decimation", "[viz]") {
  Series s = noisy(200'000, 3);
  s.ys[123'457] = 1000.0f;
  auto out = decimate_minmax(s.xs.data(), s.ys.data(), s.xs.size(), 0.0, 199'999.0, 300);
  bool found = false;
  for (const auto& p : out) found |= (p.x == 123'457.0 && p.y == 1000.0f);
  CHECK(found);
}

TEST_CASE("few samples pass through exactly, a zoomed window keeps one neighbour each side", "[viz]") {
  Series s = noisy(50, 1);
  auto all = decimate_minmax(s.xs.data(), s.ys.data(), s.xs.size(), 0.0, 49.0, 400);
  REQUIRE(all.size() == 50);
  for (std::size_t i = 0; i < 50; ++i) CHECK(all[i].y == s.ys[i]);

  auto window = decimate_minmax(s.xs.data(), s.ys.data(), s.xs.size(), 10.5, 20.5, 400);
  REQUIRE(!window.empty());
  CHECK(window.front().x == 10.0);
  CHECK(window.back().x == 21.0);
}

TEST_CASE("non-finite samples are dropped and empty input gives nothing", "[viz]") {
  std::vector<double> xs{0, 1, 2, 3};
  std::vector<float> ys{1.0f, std::numeric_limits<float>::quiet_NaN(), INFINITY, 2.0f};
  auto out = decimate_minmax(xs.data(), ys.data(), xs.size(), 0.0, 3.0, 100);
  REQUIRE(out.size() == 2);
  CHECK(out[1].y == 2.0f);
  CHECK(decimate_minmax(xs.data(), ys.data(), 0, 0.0, 3.0, 100).empty());
  CHECK(decimate_minmax(xs.data(), ys.data(), xs.size(), 3.0, 3.0, 100).empty());
}
