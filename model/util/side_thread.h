// SideThread: one job at a time on a thread of its own, handed over with little latency. The
// engine uses it to measure an inspect token's probes while its own thread steps the next token,
// or with forks to step the next token while its own thread measures the probes (engine.overlap,
// issue 20, model/engine/branch.h's SideJob): both halves take 100-600 µs, depending on the
// machine, so a hand-over through a sleeping condition variable alone (tens of µs to wake; 50 µs
// and more in a VM) would eat much of the gain. Each side therefore spins before it sleeps, for as
// long as its last wait of the same kind took, twice over (spin_budget in side_thread.cpp).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "model/util/work_share.h"

namespace memscope::model {

class SideThread {
 public:
  SideThread();
  ~SideThread();  // waits for the job in hand, then ends the thread
  SideThread(const SideThread&) = delete;
  SideThread& operator=(const SideThread&) = delete;

  // Starts `job` on the side thread. One at a time: a job already in hand is waited for first.
  void run(std::function<void()> job);
  // The same when a spare core is free, else false (and nothing runs): the caller does the work.
  // A process has spare_cores() of them, and a job holds one while it runs. On a 2-core machine, a
  // fork stepping ahead too (three busy threads on two cores, each spinning for the others) made a
  // run with one fork slower than none stepping ahead; with the spare core for one job at a time,
  // it is faster.
  bool try_run(std::function<void()> job);
  // Returns once the job has returned (at once when there is none); rethrows what it threw.
  // Meanwhile it runs items of the loops the job shares (for_each_shared, model/util/work_share.h).
  void wait();
  bool busy() const { return busy_.load(std::memory_order_acquire); }
  // Items of its jobs' shared loops that wait() has run (model/util/work_share.h).
  int64_t items_helped() const { return share_.helped(); }

  // The cores this process may run on (its affinity mask) less the caller's own.
  static int spare_cores();

  // How long a wait spins before it sleeps, given how long the last wait of its kind took (a job's
  // run, or the thread's idle time between two jobs): twice that, within [200 µs, 4 ms]; a last
  // wait beyond 4 ms (a GUI stepping 30 times a second) gives 200 µs.
  static std::chrono::nanoseconds spin_budget(std::chrono::nanoseconds last_wait);

 private:
  void start(std::function<void()> job, bool holds_core);
  void announce_share();
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<void()> job_;
  bool job_holds_core_ = false;  // a try_run job gives its spare core back when it returns
  std::exception_ptr error_;
  std::atomic<bool> busy_{false};  // a job is queued or running
  bool stop_ = false;
  // How long the last job ran, and how long the thread last waited for a job (nanoseconds): what
  // the next wait of each kind spins for (twice over, within bounds), before it sleeps.
  std::atomic<int64_t> last_job_ns_{0}, last_idle_ns_{0};
  // Loops the job offers to wait() (model/util/work_share.h); announced through done_.
  WorkShare share_{[this] { announce_share(); }};
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace memscope::model
