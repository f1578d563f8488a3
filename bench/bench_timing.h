// The benches' timing helpers: wall seconds of a call, and the median of repetitions (the figure
// every bench reports, so that one noisy repetition does not move it).
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace memscope::bench {

inline double seconds_of(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace memscope::bench
