#include "model/util/side_thread.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "model/util/cpu_quota.h"
#include "model/util/cpu_relax.h"

namespace memscope::model {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::nanoseconds;

// How long a side spins for the other before it sleeps (SideThread::spin_budget). A wait like the
// last one (a step, or the engine's probes between two hand-overs) is spun through: twice the last
// one's length, at least kMinSpin, at most kMaxSpin. One 200 µs spin for every wait had been tuned
// where demo-mqar's step took 100 µs; where it takes 500 µs (an AMD VM, README "Hand-overs on a
// slower machine") both sides slept at every token, and the side thread started its job 56 µs
// after the launch on average. Beyond kMaxSpin (a GUI stepping 30 times a second waits 33 ms) or
// after the spin, the side sleeps: an idle or paused engine spins a few ms once, nothing after.
constexpr nanoseconds kMinSpin = std::chrono::microseconds(200);
constexpr nanoseconds kMaxSpin = std::chrono::milliseconds(4);
constexpr nanoseconds kLaunchGrace = std::chrono::microseconds(20);

nanoseconds budget_after(const std::atomic<int64_t>& last_ns) {
  return SideThread::spin_budget(nanoseconds(last_ns.load(std::memory_order_relaxed)));
}

template <typename Done>
void spin_until(Done done, nanoseconds budget = kMinSpin) {
  const auto until = Clock::now() + budget;
  for (int i = 0; !done(); ++i) {
    cpu_relax();
    if (i % 64 == 63 && Clock::now() > until) return;
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

nanoseconds SideThread::spin_budget(nanoseconds last_wait) {
  if (last_wait > kMaxSpin) return kMinSpin;  // waits this long are paced, not hand-overs: sleep soon
  return std::clamp(2 * last_wait, kMinSpin, kMaxSpin);
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
  // Spins, helping with the job's shared items as they come; after an item it spins afresh, so
  // that a long item does not use up the spin and leave the job's end to a sleep and a wake-up.
  for (;;) {
    spin_until([this] { return !busy() || share_.has_items(); }, budget_after(last_job_ns_));
    if (!share_.help()) break;
  }
  std::unique_lock<std::mutex> lock = lock_soon(mutex_);
  for (;;) {
    done_.wait(lock, [this] { return !busy() || share_.has_items(); });
    if (!busy()) break;
    lock.unlock();
    share_.help();
    lock = lock_soon(mutex_);
  }
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void SideThread::announce_share() {
  // Taken and let go, so that a wait() that has just found no items is asleep before the notify.
  { std::lock_guard<std::mutex> lock(mutex_); }
  done_.notify_all();
}

void SideThread::loop() {
  for (;;) {
    const auto idle_from = Clock::now();
    // Idle, it spins only while a spare core is free. When every spare core runs another
    // timeline's job (a fork stepping ahead), spinning here would make three busy threads on two
    // cores. Its own launch takes the core a moment before it sets busy: that is waited for briefly.
    spin_until([this] { return busy() || free_cores().load(std::memory_order_relaxed) == 0; }, budget_after(last_idle_ns_));
    if (!busy()) spin_until([this] { return busy(); }, kLaunchGrace);
    std::function<void()> job;
    bool holds_core = false;
    {
      std::unique_lock<std::mutex> lock = lock_soon(mutex_);
      wake_.wait(lock, [this] { return busy() || stop_; });
      if (!busy()) return;  // stopped with nothing in hand
      job = std::move(job_);
      holds_core = job_holds_core_;
    }
    const auto job_from = Clock::now();
    last_idle_ns_.store(nanoseconds(job_from - idle_from).count(), std::memory_order_relaxed);
    std::exception_ptr error;
    try {
      const ScopedWorkShare shared(&share_);
      job();
    } catch (...) {
      error = std::current_exception();
    }
    last_job_ns_.store(nanoseconds(Clock::now() - job_from).count(), std::memory_order_relaxed);
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
