#include "model/util/work_share.h"

#include <thread>

#include "model/util/cpu_relax.h"

namespace memscope::model {

namespace {

thread_local WorkShare* current = nullptr;

}  // namespace

void WorkShare::run(int64_t count, const std::function<void(int64_t)>& item) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    item_ = &item;
    count_.store(count, std::memory_order_relaxed);
    error_ = nullptr;
    next_.store(0, std::memory_order_relaxed);
    offered_ = true;
    open_.store(true, std::memory_order_release);
  }
  announce_();
  std::exception_ptr mine;
  const ScopedWorkShare serial(nullptr);  // a loop inside an item runs where it is
  for (int64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < count;) {
    try {
      item(i);
    } catch (...) {
      if (!mine) mine = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    offered_ = false;  // no helper enters now; those inside finish the items they claimed
    open_.store(false, std::memory_order_release);
  }
  for (int spins = 0; helpers_.load(std::memory_order_acquire) > 0; ++spins) {
    if (spins < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  item_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

bool WorkShare::help() {
  if (!has_items()) return false;  // without the mutex: a waiting thread calls this as it spins
  const std::function<void(int64_t)>* item = nullptr;
  int64_t count = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    count = count_.load(std::memory_order_relaxed);
    if (!offered_ || next_.load(std::memory_order_relaxed) >= count) return false;
    helpers_.fetch_add(1, std::memory_order_acq_rel);
    item = item_;
  }
  bool ran = false;
  const ScopedWorkShare serial(nullptr);
  for (int64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < count;) {
    ran = true;
    helped_.fetch_add(1, std::memory_order_relaxed);
    try {
      (*item)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  helpers_.fetch_sub(1, std::memory_order_acq_rel);
  return ran;
}

bool WorkShare::has_items() const {
  return open_.load(std::memory_order_acquire) &&
         next_.load(std::memory_order_relaxed) < count_.load(std::memory_order_relaxed);
}

WorkShare* current_work_share() { return current; }

ScopedWorkShare::ScopedWorkShare(WorkShare* share) : previous_(current) { current = share; }
ScopedWorkShare::~ScopedWorkShare() { current = previous_; }

void for_each_shared(int64_t count, const std::function<void(int64_t)>& item) {
  WorkShare* share = current_work_share();
  if (share && count > 1) {
    share->run(count, item);
    return;
  }
  for (int64_t i = 0; i < count; ++i) item(i);
}

}  // namespace memscope::model
