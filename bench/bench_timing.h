// The benches' timing helpers: wall seconds of a call, the process's CPU seconds, and the median of
// repetitions (the figure every bench reports, so that one noisy repetition does not move it).
#pragma once
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <vector>

namespace memscope::bench {

inline double seconds_of(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// User and system time of every thread of the process (the engine's, a side thread's, the GUI's).
inline double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Minor page faults of the process so far (every thread): a stepping path that allocates and frees
// large blocks, or keeps new memory (the frame ring growing), faults pages in as it goes (issue
// 20's "no allocation per token"). On the PVM VMs that run CI a fault costs 10-25 µs.
inline int64_t minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// The process's resident memory now, bytes (/proc/self/statm; 0 where there is none). Its growth
// over a run is the memory touched for the first time: on the PVM VMs that run CI a first touch
// writes 0.35-0.8 GB/s against ~20 GB/s for a memset of memory already touched, so a probed token
// that keeps 27 KB more (a Titans-MLP frame and its share of a snapshot) pays 30-70 µs for it
// until the frame ring is full.
inline double resident_bytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace memscope::bench
