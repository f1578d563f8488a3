// What a second thread does to this thread's speed: the reading every two-thread figure needs on a
// VM. The engine's overlapped probes (engine.overlap) run on a second core while the engine thread
// steps. They are nearly free where the two vCPUs are two cores that share a last-level cache, cost
// more where the cores share none (every line handed over crosses between them), and cost as much
// as running them in line where the host puts both vCPUs on one physical core (SMT siblings, or
// one core shared in time). The CI VMs switch between these within the hour (README "The two
// vCPUs, shared or not"), so probe_overhead measures which it had, beside each repetition.
//
// One round times a fixed kernel (a 64×64 float matrix product in the caller's core's L1) with the
// other thread asleep, spinning on a flag with cpu_relax() (as SideThread waits for its next job),
// and computing the same kernel; each against asleep. Then it times a number's round trip to the
// other thread and back through two cache lines: the price of each line the engine hands to the
// probes' thread and gets back (108-129 ns on the CI VM where its cores share a cache, 466-560 ns
// where they do not).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "model/util/cpu_relax.h"

namespace memscope::bench {

class CoreSharing {
 public:
  struct Round {
    double spin_ratio = 1, busy_ratio = 1;  // the kernel's time with the other thread spinning, computing
    // A number written here and echoed there: two cache lines' trips between the cores.
    double round_trip_ns = 0;
  };

  CoreSharing() : other_([this] { loop(); }) {}
  ~CoreSharing() {
    set(Mode::Stop);
    other_.join();
  }
  CoreSharing(const CoreSharing&) = delete;
  CoreSharing& operator=(const CoreSharing&) = delete;

  Round measure() {
    const double asleep = timed(Mode::Asleep);
    Round r;
    r.spin_ratio = timed(Mode::Spin) / asleep;
    r.busy_ratio = timed(Mode::Busy) / asleep;
    r.round_trip_ns = round_trip();
    set(Mode::Asleep);
    return r;
  }

 private:
  enum class Mode { Asleep, Spin, Busy, Echo, Stop };
  static constexpr int kTrips = 4096;
  static constexpr int kSide = 64;

  // The kernel's time over a few runs, with the other thread in `mode` (it is given 2 ms to settle).
  double timed(Mode mode) {
    set(mode);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 8; ++i) product(a_, c_);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // The mean time for a number written here to come back from the other thread, which echoes it.
  double round_trip() {
    set(Mode::Echo);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const int64_t first = ping_.load(std::memory_order_relaxed) + 1;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = first; i < first + kTrips; ++i) {
      ping_.store(i, std::memory_order_release);
      while (pong_.load(std::memory_order_acquire) != i) memscope::model::cpu_relax();
    }
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
           kTrips;
  }

  static void product(std::vector<float>& a, std::vector<float>& c) {
    for (int i = 0; i < kSide; ++i)
      for (int k = 0; k < kSide; ++k) {
        const float x = a[static_cast<size_t>(i * kSide + k)] * 1e-3f;
        for (int j = 0; j < kSide; ++j)
          c[static_cast<size_t>(i * kSide + j)] += x * a[static_cast<size_t>(k * kSide + j)];
      }
  }

  void set(Mode mode) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      mode_.store(mode, std::memory_order_release);
    }
    wake_.notify_one();
  }

  void loop() {
    for (;;) {
      switch (mode_.load(std::memory_order_acquire)) {
        case Mode::Stop:
          return;
        case Mode::Asleep: {
          std::unique_lock<std::mutex> lock(mutex_);
          wake_.wait(lock, [this] { return mode_.load(std::memory_order_acquire) != Mode::Asleep; });
          break;
        }
        case Mode::Spin:
          memscope::model::cpu_relax();
          break;
        case Mode::Busy:
          product(side_a_, side_c_);
          break;
        case Mode::Echo:
          if (const int64_t i = ping_.load(std::memory_order_acquire);
              i != pong_.load(std::memory_order_relaxed))
            pong_.store(i, std::memory_order_release);
          memscope::model::cpu_relax();
          break;
      }
    }
  }

  // The kernel's operands: this thread's, and the other's (members, so that its work is kept).
  std::vector<float> a_ = std::vector<float>(kSide * kSide, 1.0f),
                     c_ = std::vector<float>(kSide * kSide, 0.0f);
  std::vector<float> side_a_ = a_, side_c_ = c_;
  alignas(64) std::atomic<int64_t> ping_{0};
  alignas(64) std::atomic<int64_t> pong_{0};
  alignas(64) std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<Mode> mode_{Mode::Asleep};
  std::thread other_;  // last: it starts once the members above are made
};

// `count` threads that compute from construction to destruction: a machine busy with other work.
class BusyThreads {
 public:
  explicit BusyThreads(int count) {
    for (int i = 0; i < count; ++i)
      threads_.emplace_back([this] {
        double x = 1;
        while (!stop_.load(std::memory_order_relaxed)) x = x * 1.0000001 + 1e-9;
        sink_.store(x, std::memory_order_relaxed);
      });
  }
  ~BusyThreads() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  BusyThreads(const BusyThreads&) = delete;
  BusyThreads& operator=(const BusyThreads&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<double> sink_{0};  // what they computed, kept
  std::vector<std::thread> threads_;
};

}  // namespace memscope::bench
