#include "model/util/sum_of_squares.h"

#include "model/util/simd_clones.h"

namespace memscope::model {

namespace {

constexpr int kPartialSums = 32;  // independent double sums: four AVX-512 registers, each add waits on no other

template <bool Difference>
[[gnu::always_inline]] inline double sum_of_squares(const float* __restrict x, const float* __restrict y, int64_t n) {
  double sums[kPartialSums] = {};
  int64_t i = 0;
  for (; i + kPartialSums <= n; i += kPartialSums)
    for (int j = 0; j < kPartialSums; ++j) {
      const double v = static_cast<double>(x[i + j]) - (Difference ? static_cast<double>(y[i + j]) : 0.0);
      sums[j] += v * v;
    }
  for (; i < n; ++i) {
    const double v = static_cast<double>(x[i]) - (Difference ? static_cast<double>(y[i]) : 0.0);
    sums[0] += v * v;
  }
  double squares = 0;
  for (double part : sums) squares += part;
  return squares;
}

}  // namespace

MEMSCOPE_SIMD_CLONES
double squares_of(const float* x, int64_t n) { return sum_of_squares<false>(x, nullptr, n); }

MEMSCOPE_SIMD_CLONES
double squares_of_difference(const float* x, const float* y, int64_t n) { return sum_of_squares<true>(x, y, n); }

}  // namespace memscope::model
