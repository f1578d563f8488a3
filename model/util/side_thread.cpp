#include "model/util/side_thread.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "model/util/cpu_quota.h"

namespace memscope::model {

namespace {

// How long either side spins for the other before it sleeps: longer than a step's hand-over
// (the engine hands a job over every 100-200 µs while it runs), short enough that an idle or
// paused engine costs nothing measurable.
constexpr std::chrono::microseconds kSpin{200};

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

template <typename Done>
void spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0; !done(); ++i) {
    relax();
    if (i % 64 == 63 && std::chrono::steady_clock::now() > until) return;
  }
}

// The mutex, taken without sleeping when its holder lets go within the spin. Whoever spins for the
// other side's flag finds it set while that side still holds the mutex (it sets the flag under
// the mutex, for the sleeper's sake); blocking there would sleep in the kernel and wake µs later.
std::unique_lock<std::mutex> lock_soon(std::mutex& mutex) {
  std::unique_lock<std::mutex> lock(mutex, std::defer_lock);
  spin_until([&] { return lock.try_lock(); });
  if (!lock.owns_lock()) lock.lock();
  return lock;
}

// The spare cores not held by a running job, process-wide.
std::atomic<int>& free_cores() {
  static std::atomic<int> free{SideThread::spare_cores()};
  return free;
}

bool take_spare_core() {
  int free = free_cores().load(std::memory_order_relaxed);
  while (free > 0)
    if (free_cores().compare_exchange_weak(free, free - 1, std::memory_order_acquire)) return true;
  return false;
}

}  // namespace

int SideThread::spare_cores() {
  // The affinity mask, not the machine: taskset or a container's cpuset may give fewer; and a
  // container's CPU quota may allow fewer still (model/util/cpu_quota.h).
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(std::thread::hardware_concurrency());
  if (const auto limit = cgroup_cpu_limit()) cores = std::min(cores, *limit);
  return std::max(1, cores) - 1;
}

SideThread::SideThread() : thread_([this] { loop(); }) {}

SideThread::~SideThread() {
  try {
    wait();
  } catch (...) {
    // Nobody asked for that job's outcome.
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void SideThread::run(std::function<void()> job) {
  try {
    wait();
  } catch (...) {
    // The previous job's failure was never asked for: the new job replaces it.
  }
  start(std::move(job), false);
}

bool SideThread::try_run(std::function<void()> job) {
  try {
    wait();
  } catch (...) {
    // As in run().
  }
  if (!take_spare_core()) return false;
  start(std::move(job), true);
  return true;
}

void SideThread::start(std::function<void()> job, bool holds_core) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = std::move(job);
    job_holds_core_ = holds_core;
    error_ = nullptr;
    busy_.store(true, std::memory_order_release);
  }
  wake_.notify_one();
}

void SideThread::wait() {
  spin_until([this] { return !busy(); });
  std::unique_lock<std::mutex> lock = lock_soon(mutex_);
  done_.wait(lock, [this] { return !busy(); });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void SideThread::loop() {
  for (;;) {
    spin_until([this] { return busy(); });
    std::function<void()> job;
    bool holds_core = false;
    {
      std::unique_lock<std::mutex> lock = lock_soon(mutex_);
      wake_.wait(lock, [this] { return busy() || stop_; });
      if (!busy()) return;  // stopped with nothing in hand
      job = std::move(job_);
      holds_core = job_holds_core_;
    }
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    job = nullptr;  // what it captured is dropped here, before the caller hears it is done
    if (holds_core) free_cores().fetch_add(1, std::memory_order_release);  // idle now: another job may take it
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = error;
      busy_.store(false, std::memory_order_release);
    }
    done_.notify_all();
  }
}

}  // namespace memscope::model
