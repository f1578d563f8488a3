// The sums of squares (model/util/sum_of_squares.h) that the fused steps' records and the probes'
// norms share: against a plain long double loop at every length around the partial sums' width
// (the tail after the last full group goes to the first sum), and NaN and Inf carried through.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "model/util/sum_of_squares.h"

using namespace memscope::model;

namespace {

long double reference(const std::vector<float>& x, const std::vector<float>* y) {
  long double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const long double v = static_cast<long double>(x[i]) - (y ? static_cast<long double>((*y)[i]) : 0.0L);
    sum += v * v;
  }
  return sum;
}

}  // namespace

TEST_CASE("sums of squares equal a long double loop at every length, tails included", "[model]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const int64_t n : {0, 1, 7, 8, 31, 32, 33, 63, 65, 256, 1000, 1024, 4097}) {
    std::vector<float> x(static_cast<size_t>(n)), y(x.size());
    for (auto& v : x) v = normal(rng);
    for (auto& v : y) v = normal(rng);
    INFO("n = " << n);
    const double squares = squares_of(x.data(), n), difference = squares_of_difference(x.data(), y.data(), n);
    // Each square is exact in double (a float's 24 bits squared); only the adds round.
    CHECK(squares == Approx(static_cast<double>(reference(x, nullptr))).epsilon(1e-13).margin(0));
    CHECK(difference == Approx(static_cast<double>(reference(x, &y))).epsilon(1e-13).margin(0));
    CHECK(squares_of_difference(x.data(), x.data(), n) == 0.0);
  }
}

TEST_CASE("sums of squares carry NaN and Inf wherever they sit", "[model]") {
  std::vector<float> x(70, 1.0f);
  for (const size_t at : {size_t{0}, size_t{31}, size_t{69}}) {  // a group's first lane, its last, the tail
    std::vector<float> bad = x;
    bad[at] = std::numeric_limits<float>::quiet_NaN();
    CHECK(std::isnan(squares_of(bad.data(), 70)));
    CHECK(std::isnan(squares_of_difference(bad.data(), x.data(), 70)));
    bad[at] = std::numeric_limits<float>::infinity();
    CHECK(std::isinf(squares_of(bad.data(), 70)));
    CHECK(std::isinf(squares_of_difference(x.data(), bad.data(), 70)));
  }
  CHECK(squares_of(x.data(), 70) == 70.0);
}
