#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "viz/axis_ticks.h"

using memscope::viz::nice_ticks;

TEST_CASE("nice ticks are round multiples inside the range", "[viz]") {
  auto t = nice_ticks(0.52, 9.48, 4);
  CHECK(t == std::vector<double>{2.0, 4.0, 6.0, 8.0});
  auto small = nice_ticks(-0.013, 0.021, 4);
  REQUIRE(!small.empty());
  for (double v : small) {
    CHECK(v >= -0.013);
    CHECK(v <= 0.021);
    const double units = v / 0.01;  // step is 0.01 here
    CHECK(std::abs(units - std::round(units)) < 1e-9);
  }
  CHECK(std::find(small.begin(), small.end(), 0.0) != small.end());
}

TEST_CASE("nice ticks: degenerate ranges give none, counts stay near the target", "[viz]") {
  CHECK(nice_ticks(1.0, 1.0).empty());
  CHECK(nice_ticks(2.0, 1.0).empty());
  CHECK(nice_ticks(0.0, NAN).empty());
  for (double hi : {1.0, 3.7, 10.0, 123.4, 1e6})
    for (int target : {2, 4, 8}) {
      auto t = nice_ticks(0.0, hi, target);
      CHECK(t.size() >= 1);
      CHECK(t.size() <= static_cast<std::size_t>(2 * target + 1));
    }
}

TEST_CASE("tick labels: neighbouring ticks read differently, however narrow the range", "[viz]") {
  using memscope::viz::tick_label;
  // A state norm wandering in [17.88, 18.02]: "%.3g" printed 17.9 for three different ticks.
  for (auto [lo, hi] : {std::pair{17.88, 18.02}, std::pair{1000.001, 1000.004}, std::pair{-0.5012, -0.5003}, std::pair{0.0, 3.0}}) {
    const auto ticks = nice_ticks(lo, hi, 4);
    REQUIRE(ticks.size() >= 2);
    std::vector<std::string> labels;
    for (double t : ticks) labels.push_back(tick_label(t, ticks[1] - ticks[0]));
    INFO(lo << " .. " << hi << ": " << labels.front() << " … " << labels.back());
    CHECK(std::adjacent_find(labels.begin(), labels.end()) == labels.end());
    // Each label reads back as its tick, to a small fraction of the step.
    for (size_t i = 0; i < ticks.size(); ++i) CHECK(std::abs(std::stod(labels[i]) - ticks[i]) < 1e-6 * (ticks[1] - ticks[0]) + 1e-12);
  }
  // Ordinary ranges keep the short labels they had.
  CHECK(tick_label(0.5, 0.5) == "0.5");
  CHECK(tick_label(0.0, 0.5) == "0");
  CHECK(tick_label(1500.0, 500.0) == "1.5e+03");
  CHECK(tick_label(0.0125, 0.0025) == "0.0125");
  CHECK(tick_label(17.95, 0.05) == "17.95");
}
