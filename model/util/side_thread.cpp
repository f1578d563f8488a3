#include "model/util/side_thread.h"

#include <algorithm>
#include <chrono>

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

// The machine's cores less the caller's own: what try_run may take at once, process-wide.
std::atomic<int>& spare_cores() {
  static std::atomic<int> spare{static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) - 1};
  return spare;
}

bool take_spare_core() {
  int free = spare_cores().load(std::memory_order_relaxed);
  while (free > 0)
    if (spare_cores().compare_exchange_weak(free, free - 1, std::memory_order_acquire)) return true;
  return false;
}

}  // namespace

SideThread::SideThread() : thread_([this] { loop(); }) {}

SideThread::~SideThread() {
  try {
    wait();  // gives back a spare core the job held
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = std::move(job);
    error_ = nullptr;
    busy_.store(true, std::memory_order_release);
  }
  wake_.notify_one();
}

bool SideThread::try_run(std::function<void()> job) {
  try {
    wait();
  } catch (...) {
    // As in run(): the previous job's failure was never asked for.
  }
  if (!take_spare_core()) return false;
  run(std::move(job));
  holds_core_ = true;  // after run(), whose own wait() would give it back
  return true;
}

void SideThread::wait() {
  spin_until([this] { return !busy(); });
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return !busy(); });
  if (holds_core_) {
    holds_core_ = false;
    spare_cores().fetch_add(1, std::memory_order_release);
  }
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void SideThread::loop() {
  for (;;) {
    spin_until([this] { return busy(); });
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return busy() || stop_; });
      if (!busy()) return;  // stopped with nothing in hand
      job = std::move(job_);
    }
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = error;
      busy_.store(false, std::memory_order_release);
    }
    done_.notify_all();
  }
}

}  // namespace memscope::model
