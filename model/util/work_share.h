// WorkShare: the items of one loop on a SideThread's job, offered to the thread that waits for
// that job (SideThread::wait), so that the wait is spent on the job instead of asleep.
//
// Why: the engine's side thread measures a probed token while the engine thread steps the next
// one, then the engine thread waits for it. A HOPE snapshot frame's probes take about 5 ms against
// a 0.5 ms step, some 2.5 ms of them the spectra of 40 matrices 64×256 in three groups of lanes
// (small_singular_values.h); the engine thread slept through them (Intel VM, 2026-12-05). Each item
// is computed whole by one thread, into its own outputs, by the same code: which thread took it
// changes no bit.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>

namespace memscope::model {

class WorkShare {
 public:
  // `announce` is called after items are offered: it wakes a thread waiting to help.
  explicit WorkShare(std::function<void()> announce) : announce_(std::move(announce)) {}
  WorkShare(const WorkShare&) = delete;
  WorkShare& operator=(const WorkShare&) = delete;

  // item(i) for every i in [0, count), on this thread and on any thread in help() meanwhile;
  // returns once all are done, rethrowing a failure: this thread's first, else a helper's first
  // (every item still runs).
  void run(int64_t count, const std::function<void(int64_t)>& item);
  // Runs items of the loop in progress until none is left unclaimed. Returns whether it ran any.
  bool help();
  // Whether a loop is in progress with items not yet claimed.
  bool has_items() const;
  // Items that help() has run, in all loops so far (for tests and benches).
  int64_t helped() const { return helped_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mutex_;  // guards entering help() against run() ending
  std::function<void()> announce_;
  const std::function<void(int64_t)>* item_ = nullptr;
  std::atomic<int64_t> count_{0};
  bool offered_ = false;
  std::atomic<bool> open_{false};  // offered_, read without the mutex by has_items
  std::atomic<int64_t> next_{0};   // the next unclaimed item
  std::atomic<int> helpers_{0};    // threads inside help() on this loop
  std::atomic<int64_t> helped_{0};
  std::exception_ptr error_;       // the first item's failure, under mutex_
};

// The WorkShare of the SideThread job running on this thread (null elsewhere: its loops run
// where they are).
WorkShare* current_work_share();

// Sets this thread's current_work_share for a scope (SideThread::loop, around each job).
class ScopedWorkShare {
 public:
  explicit ScopedWorkShare(WorkShare* share);
  ~ScopedWorkShare();
  ScopedWorkShare(const ScopedWorkShare&) = delete;
  ScopedWorkShare& operator=(const ScopedWorkShare&) = delete;

 private:
  WorkShare* previous_;
};

// item(i) for i in [0, count): shared through current_work_share() when there is one and more than
// one item, else here in order.
void for_each_shared(int64_t count, const std::function<void(int64_t)>& item);

}  // namespace memscope::model
