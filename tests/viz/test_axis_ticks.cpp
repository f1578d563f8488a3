#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

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
