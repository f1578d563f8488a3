#include "model/util/cpu_memory_watch.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "model/util/small_block_cache.h"

namespace memscope::model {

namespace {

// Counted bytes alive in the process: added on the watching thread, taken off wherever a counted
// block is freed, even after its watch ended (a step's gradients outlive the step's watch).
std::atomic<int64_t> g_live{0};
// The one live watch's numbers. Only its thread allocates counted blocks, so only it writes them.
std::atomic<bool> g_taken{false};
int64_t g_base = 0, g_limit = 0;
std::atomic<int64_t> g_peak{0};
thread_local bool t_watching = false;

}  // namespace

std::string memory_size_text(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  char text[32];
  if (b >= 1e9)
    std::snprintf(text, sizeof text, "%.2f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(text, sizeof text, "%.1f MB", b / 1e6);
  else
    std::snprintf(text, sizeof text, "%.1f kB", b / 1e3);
  return text;
}

CpuMemoryLimitReached::CpuMemoryLimitReached(int64_t requested, int64_t held, int64_t limit)
    : std::runtime_error("a tensor of " + memory_size_text(requested) + " on top of " +
                         memory_size_text(held) + " would pass the limit of " + memory_size_text(limit)),
      requested(requested),
      held(held),
      limit(limit) {}

CpuMemoryWatch::CpuMemoryWatch(int64_t limit_bytes) {
  if (!cpu_memory_counted() || g_taken.exchange(true)) return;
  counting_ = true;
  g_base = g_live.load();
  g_limit = limit_bytes;
  g_peak = 0;
  watching_ = &t_watching;
  *watching_ = true;
}

CpuMemoryWatch::~CpuMemoryWatch() {
  if (!counting_) return;
  *watching_ = false;
  g_taken = false;
}

bool cpu_memory_counted() { return small_block_cache_stats().installed; }

std::optional<int64_t> run_watched(int64_t limit_bytes, const std::function<void()>& work) {
  const at::ThreadLocalState state;
  // OpenMP keeps the intra-op thread count per thread: a new one would start from the default,
  // and a reduction split another way sums in another order (a resumed run must repeat the bits).
  const int threads = at::get_num_threads();
  std::optional<int64_t> peak;
  std::exception_ptr error;
  std::thread([&] {
    at::ThreadLocalStateGuard same_state(state);
    at::set_num_threads(threads);
    try {
      CpuMemoryWatch watch(limit_bytes);
      work();
      if (watch.counting()) peak = watch.peak();
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
  return peak;
}

int64_t CpuMemoryWatch::peak() const { return counting_ ? g_peak.load() : 0; }

namespace cpu_memory_accounting {

bool on_allocate(std::size_t bytes) {
  if (!t_watching) return false;
  const auto size = static_cast<int64_t>(bytes);
  const int64_t held = g_live.load() - g_base;
  if (g_limit > 0 && held + size > g_limit) throw CpuMemoryLimitReached(size, held, g_limit);
  const int64_t now = g_live.fetch_add(size) + size - g_base;
  if (now > g_peak.load(std::memory_order_relaxed)) g_peak.store(now, std::memory_order_relaxed);
  return true;
}

void on_release(std::size_t bytes) { g_live.fetch_sub(static_cast<int64_t>(bytes)); }

}  // namespace cpu_memory_accounting

}  // namespace memscope::model
