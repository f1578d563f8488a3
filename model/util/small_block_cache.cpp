#include "model/util/small_block_cache.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "model/util/cpu_memory_watch.h"
#include "model/util/cpu_relax.h"

// LibTorch 2.3 made Allocator::allocate non-const and added pure virtuals (copy_data) whose exact
// form later versions changed again; the cache is built against the interface of 1.13 to 2.2, and
// elsewhere install_small_block_cache() leaves LibTorch's allocator in place.
#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 3)
#define MEMSCOPE_SMALL_BLOCK_CACHE_BUILT 1
#else
#define MEMSCOPE_SMALL_BLOCK_CACHE_BUILT 0
#endif

namespace memscope::model {

#if MEMSCOPE_SMALL_BLOCK_CACHE_BUILT
namespace {

// c10's alignment for CPU storage (gAlignment): vector loads over a tensor's start stay aligned.
constexpr std::size_t kAlignment = 64;
// Each block starts with one alignment's worth of header (the data follows, still aligned), so that
// the deleter, which gets only the data pointer, knows the block's list and whether a memory watch
// counted it (cpu_memory_watch.h).
constexpr std::size_t kHeader = kAlignment;
constexpr int kSmallestShift = 6;                      // 64 B
constexpr int kClasses = 15;                           // 64 B … 1 MB
constexpr int kUncached = -1;                          // a larger block: freed at once
constexpr std::size_t kMaxCachedBytes = 128u << 20;

struct BlockHeader {
  int size_class;
  bool counted;         // by a CpuMemoryWatch: its release is taken off the count
  std::size_t payload;  // the bytes after the header
};
static_assert(sizeof(BlockHeader) <= kHeader, "the header fits before the data");

std::size_t class_bytes(int size_class) { return std::size_t{1} << (size_class + kSmallestShift); }

int size_class_of(std::size_t bytes) {
  int c = 0;
  while (c < kClasses && class_bytes(c) < bytes) ++c;
  return c < kClasses ? c : kUncached;
}

// The lock around the free lists. What it guards takes tens of nanoseconds (a push or a pop), so
// a thread that finds it held spins: std::mutex would sleep in the kernel, and waking takes tens of
// µs (more in a VM), while the holder lets go within a hundred ns. A holder descheduled mid-way
// (more busy threads than cores) is yielded to.
class SpinLock {
 public:
  void lock() {
    while (held_.exchange(true, std::memory_order_acquire))
      for (int spins = 1; held_.load(std::memory_order_relaxed); ++spins) {
        cpu_relax();
        if (spins % 1024 == 0) std::this_thread::yield();  // the holder was descheduled: let it run
      }
  }
  void unlock() { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

class SmallBlockCache final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) const override {
    if (bytes == 0) return {nullptr, nullptr, &release, c10::Device(c10::DeviceType::CPU)};
    const int size_class = size_class_of(bytes);
    const std::size_t payload = size_class == kUncached ? bytes : class_bytes(size_class);
    // Before the block is taken: a watch's limit refuses it with nothing allocated.
    const bool counted = cpu_memory_accounting::on_allocate(payload);
    void* data = size_class == kUncached ? nullptr : take(size_class);
    if (!data) {
      void* raw = nullptr;
      if (posix_memalign(&raw, kAlignment, kHeader + payload) != 0) {
        if (counted) cpu_memory_accounting::on_release(payload);
        throw std::bad_alloc();
      }
      data = static_cast<char*>(raw) + kHeader;
    }
    const BlockHeader header{size_class, counted, payload};
    std::memcpy(static_cast<char*>(data) - kHeader, &header, sizeof header);
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  SmallBlockCacheStats stats() const {
    std::lock_guard<SpinLock> lock(lock_);
    return {true, cached_bytes_, reused_};
  }

 private:
  static void release(void* data);

  void* take(int size_class) const {
    std::lock_guard<SpinLock> lock(lock_);
    auto& list = free_[static_cast<std::size_t>(size_class)];
    if (list.empty()) return nullptr;
    void* data = list.back();
    list.pop_back();
    cached_bytes_ -= class_bytes(size_class);
    ++reused_;
    return data;
  }

  // Keeps the block for its class unless the cache is full; false: the caller frees it.
  bool keep(void* data, int size_class) const {
    std::lock_guard<SpinLock> lock(lock_);
    if (cached_bytes_ + class_bytes(size_class) > kMaxCachedBytes) return false;
    free_[static_cast<std::size_t>(size_class)].push_back(data);
    cached_bytes_ += class_bytes(size_class);
    return true;
  }

  // Tensors are freed on whichever thread drops them last (the engine, the GUI, a writer), and
  // with engine.overlap two threads allocate at once: one steps a token while the other measures probes.
  mutable SpinLock lock_;
  mutable std::array<std::vector<void*>, kClasses> free_;
  mutable std::size_t cached_bytes_ = 0, reused_ = 0;
};

// Never destroyed: tensors held by static objects are freed after main() returns.
SmallBlockCache& cache() {
  static auto* instance = new SmallBlockCache();
  return *instance;
}

bool g_installed = false;

void SmallBlockCache::release(void* data) {
  if (!data) return;
  char* raw = static_cast<char*>(data) - kHeader;
  BlockHeader header{};
  std::memcpy(&header, raw, sizeof header);
  if (header.counted) cpu_memory_accounting::on_release(header.payload);
  if (header.size_class == kUncached || !cache().keep(data, header.size_class)) std::free(raw);
}

bool sanitized() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

}  // namespace

bool small_block_cache_supported() { return !sanitized(); }

void install_small_block_cache() {
  const char* setting = std::getenv("MEMSCOPE_SMALL_BLOCK_CACHE");
  if (g_installed || sanitized() || (setting && std::string(setting) == "0")) return;
  // Priority above c10's default CPU allocator (0), so that it is the one LibTorch uses.
  c10::SetCPUAllocator(&cache(), /*priority=*/1);
  g_installed = true;
}

SmallBlockCacheStats small_block_cache_stats() {
  if (!g_installed) return {};
  return cache().stats();
}

#else  // LibTorch 2.3 or later: LibTorch's own allocator stays

bool small_block_cache_supported() { return false; }
void install_small_block_cache() {}
SmallBlockCacheStats small_block_cache_stats() { return {}; }

#endif

}  // namespace memscope::model
