// How much CPU memory a piece of work's tensors take at their peak, and a ceiling it may not pass.
// A training step that does not fit in the machine's memory is not an error LibTorch can report on
// Linux: the kernel's OOM killer ends the process without a word (the d512×8 model at T = 2048 and
// batch 16 asks for about 90 GB). Under a watch with a limit, the allocation that would pass it
// throws instead, before anything is allocated, and the trainer says what would fit (trainer.cpp).
//
// memscope's CPU allocator (small_block_cache.h) does the counting: the blocks the watching thread
// allocates while the watch lives, less those of them freed since, on any thread. Where that
// allocator is not the process's (AddressSanitizer, LibTorch 2.3 or later,
// MEMSCOPE_SMALL_BLOCK_CACHE=0), a watch counts nothing and says so (counting()).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace memscope::model {

// Thrown on the watching thread by the allocation that would take its tensors past the limit; that
// allocation is not made.
class CpuMemoryLimitReached : public std::runtime_error {
 public:
  CpuMemoryLimitReached(int64_t requested, int64_t held, int64_t limit);
  int64_t requested, held, limit;  // bytes
};

class CpuMemoryWatch {
 public:
  // limit_bytes 0: no limit, only the peak is measured.
  explicit CpuMemoryWatch(int64_t limit_bytes = 0);
  ~CpuMemoryWatch();
  CpuMemoryWatch(const CpuMemoryWatch&) = delete;
  CpuMemoryWatch& operator=(const CpuMemoryWatch&) = delete;

  // Whether this watch counts: memscope's allocator serves the CPU and no other watch is live in
  // the process (one at a time; a second counts nothing). peak() stays 0 where it does not.
  bool counting() const { return counting_; }
  // The most bytes of the watched tensors alive at once, so far.
  int64_t peak() const;

 private:
  bool counting_ = false;
  bool* watching_ = nullptr;  // the creating thread's flag, whichever thread ends the watch
};

// Runs `work` under a watch with `limit_bytes` (0: none) on a thread of its own, with this thread's
// LibTorch state (grad mode, dispatch keys), and waits for it. Returns the peak, or none where
// nothing was counted; rethrows what `work` threw, CpuMemoryLimitReached included. Why a thread:
// when a backward throws, LibTorch's autograd keeps the tasks it had queued, and the graph they
// hold, in the thread's ready queue until that thread's next backward reaches them (pytorch#33157);
// a thread of its own takes them with it when it ends, so a stopped pass leaves nothing behind.
std::optional<int64_t> run_watched(int64_t limit_bytes, const std::function<void()>& work);

// Whether memscope's allocator counts in this process (cpu_memory_watch.h's top).
bool cpu_memory_counted();

// A size for a message: "16.52 GB", "350.2 MB", "12.0 kB".
std::string memory_size_text(int64_t bytes);

// The allocator's side (small_block_cache.cpp).
namespace cpu_memory_accounting {
// Before a block of `bytes` is allocated: whether it is counted (the calling thread watches).
// Throws CpuMemoryLimitReached where it would pass the watch's limit.
bool on_allocate(std::size_t bytes);
// A counted block of `bytes` freed, on any thread, during the watch or after it.
void on_release(std::size_t bytes);
}  // namespace cpu_memory_accounting

}  // namespace memscope::model
