// SideThread: one job at a time on a thread of its own, handed over with little latency. The
// engine uses it to step the next inspect token while its own thread measures this token's probes
// (engine.overlap, issue 20): both halves take about 100 µs, so a hand-over through a sleeping
// condition variable alone (tens of µs to wake) would eat much of the gain. Each side therefore
// spins briefly before it sleeps.
#pragma once
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

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
  void wait();
  bool busy() const { return busy_.load(std::memory_order_acquire); }

  // The cores this process may run on (its affinity mask) less the caller's own.
  static int spare_cores();

 private:
  void start(std::function<void()> job, bool holds_core);
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<void()> job_;
  bool job_holds_core_ = false;  // a try_run job gives its spare core back when it returns
  std::exception_ptr error_;
  std::atomic<bool> busy_{false};  // a job is queued or running
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace memscope::model
