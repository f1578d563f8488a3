// Min/max decimation must keep what a user looks for in a plot: extremes, spikes, the ends.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "viz/decimate.h"
#include "viz/minmax_pyramid.h"

using memscope::viz::decimate_minmax;
using memscope::viz::MinMaxPyramid;

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

namespace {

// Per pixel column, the smallest and largest finite y: once from every input sample in the
// window, once from the decimated output. Columns follow decimate_minmax's pixel mapping, with
// x == x_max in one extra column.
struct ColumnExtremes {
  std::vector<float> lo, hi;
  explicit ColumnExtremes(int columns) : lo(columns + 1, INFINITY), hi(columns + 1, -INFINITY) {}
  void add(double x, float y, double x_min, double x_max, int columns) {
    if (x < x_min || x > x_max || !std::isfinite(y)) return;
    const int c = static_cast<int>(std::floor((x - x_min) / ((x_max - x_min) / columns)));
    lo[c] = std::min(lo[c], y), hi[c] = std::max(hi[c], y);
  }
};

void check_output(const Series& s, const std::vector<memscope::viz::PlotPoint>& out, double x_min, double x_max,
                  int columns) {
  ColumnExtremes expected(columns), got(columns);
  for (std::size_t i = 0; i < s.xs.size(); ++i) expected.add(s.xs[i], s.ys[i], x_min, x_max, columns);
  for (const auto& p : out) got.add(p.x, p.y, x_min, x_max, columns);
  CHECK(got.lo == expected.lo);
  CHECK(got.hi == expected.hi);

  CHECK(out.size() <= static_cast<std::size_t>(columns) * 4 + 2);
  // Every output point is a finite input sample, in x order, at most one neighbour beyond each edge.
  int before = 0, after = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    const auto it = std::lower_bound(s.xs.begin(), s.xs.end(), out[k].x);
    REQUIRE(it != s.xs.end());
    CHECK(*it == out[k].x);
    CHECK(s.ys[static_cast<std::size_t>(it - s.xs.begin())] == out[k].y);
    CHECK(std::isfinite(out[k].y));
    if (k) CHECK(out[k - 1].x < out[k].x);
    before += out[k].x < x_min, after += out[k].x > x_max;
  }
  CHECK(before <= 1);
  CHECK(after <= 1);
}

// Both paths, the scan and the summary, against the brute force, and the same points from each.
void check_against_brute_force(const Series& s, double x_min, double x_max, int columns) {
  const auto scanned = decimate_minmax(s.xs.data(), s.ys.data(), s.xs.size(), x_min, x_max, columns);
  check_output(s, scanned, x_min, x_max, columns);
  MinMaxPyramid summary;
  summary.rebuild(s.ys.data(), s.ys.size());
  const auto summarised = decimate_minmax(s.xs.data(), s.ys.data(), s.xs.size(), x_min, x_max, columns, summary);
  check_output(s, summarised, x_min, x_max, columns);
  REQUIRE(summarised.size() == scanned.size());
  for (std::size_t k = 0; k < scanned.size(); ++k) {
    CHECK(summarised[k].x == scanned[k].x);
    CHECK(summarised[k].y == scanned[k].y);
  }
}

// Steps with gaps: runs of consecutive steps separated by jumps of up to 5000 steps.
Series with_gaps(std::size_t n, unsigned seed) {
  Series s = noisy(n, seed);
  std::mt19937 rng(seed + 1);
  std::uniform_int_distribution<int> jump(0, 99);
  double x = 0.0;
  for (auto& xi : s.xs) xi = (x += jump(rng) == 0 ? 1.0 + jump(rng) * 50.0 : 1.0);
  return s;
}

// About 2% NaN and ±Inf, plus a NaN run a few columns wide.
void add_non_finite(Series& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, s.ys.size() - 1);
  for (std::size_t k = 0; k < s.ys.size() / 50; ++k) {
    const float bad[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY};
    s.ys[pick(rng)] = bad[k % 3];
  }
  for (std::size_t i = s.ys.size() / 3; i < s.ys.size() / 3 + s.ys.size() / 40; ++i)
    s.ys[i] = std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

TEST_CASE("plot decimation keeps the min and max of every pixel column, against a brute-force computation", "[viz]") {
  SECTION("a view window inside the data") {
    const Series s = noisy(1'000'000, 11);
    check_against_brute_force(s, 250'000.5, 600'000.25, 700);
    check_against_brute_force(s, 10.0, 5'000.0, 640);  // a few samples per column
  }
  SECTION("steps with gaps") {
    const Series s = with_gaps(300'000, 5);
    check_against_brute_force(s, s.xs.front(), s.xs.back(), 800);
    check_against_brute_force(s, s.xs[1000] + 0.5, s.xs[200'000] - 0.5, 513);
  }
  SECTION("NaN and infinite values") {
    Series s = noisy(400'000, 9);
    add_non_finite(s, 2);
    check_against_brute_force(s, 0.0, 399'999.0, 900);
    check_against_brute_force(s, 120'000.0, 160'000.0, 300);  // covers the NaN run
  }
  SECTION("fewer points than columns") {
    Series s = with_gaps(300, 4);
    add_non_finite(s, 6);
    check_against_brute_force(s, s.xs.front(), s.xs.back(), 1000);
    check_against_brute_force(s, s.xs[40], s.xs[120], 1000);
  }
  SECTION("just over two samples per column, where bucketing starts") {
    const Series s = noisy(2 * 400 + 3, 8);
    check_against_brute_force(s, 0.0, 2.0 * 400 + 2, 400);
  }
}

TEST_CASE("a long run of missing samples breaks the line, a short one is bridged, exact and decimated", "[viz]") {
  // Inspect bursts between training steps (train+inspect): 20 values, 40 NaN, 20 values, a 3-NaN hole.
  std::vector<double> xs;
  std::vector<float> ys;
  for (int i = 0; i < 83; ++i) {
    xs.push_back(i);
    const bool missing = (i >= 20 && i < 60) || (i >= 70 && i < 73);
    ys.push_back(missing ? NAN : static_cast<float>(i % 5));
  }
  const auto exact = decimate_minmax(xs.data(), ys.data(), xs.size(), 0.0, 82.0, 400);
  std::vector<double> gaps;
  for (const auto& p : exact)
    if (p.gap) gaps.push_back(p.x);
  CHECK(gaps == std::vector<double>{60.0});  // 40 missing: a gap; 3 missing at 70: bridged
  CHECK_FALSE(exact.front().gap);

  // Zoomed out (more samples than columns): a pixel column with no value is a gap too.
  std::vector<double> xs2;
  std::vector<float> ys2;
  for (int i = 0; i < 100'000; ++i) {
    xs2.push_back(i);
    ys2.push_back(i >= 40'000 && i < 60'000 ? NAN : 1.0f);
  }
  const auto decimated = decimate_minmax(xs2.data(), ys2.data(), xs2.size(), 0.0, 99'999.0, 200);
  int breaks = 0;
  for (const auto& p : decimated) breaks += p.gap ? 1 : 0;
  CHECK(breaks == 1);
}
