// This core's single-thread sgemm rate, the peak that the benches' shares of peak cite (issue 20).
#pragma once
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "bench/bench_timing.h"

namespace memscope::bench {

// GFLOP/s of at::mm on 512×512 float32 matrices, the best of `reps` rounds of 20 products.
inline double sgemm_peak(int reps) {
  const at::Tensor a = torch::randn({512, 512}), b = torch::randn({512, 512});
  at::Tensor c = torch::empty({512, 512});
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    const double s = seconds_of([&] {
      for (int i = 0; i < 20; ++i) at::mm_out(c, a, b);
    });
    rates.push_back(20 * 2.0 * 512 * 512 * 512 / s / 1e9);
  }
  return *std::max_element(rates.begin(), rates.end());
}

}  // namespace memscope::bench
