// LibTorch's CPU allocator asks glibc for every tensor's storage with posix_memalign, and glibc
// (2.36, Debian 12) serves aligned requests outside its per-thread cache: each one walks the
// heap's bins and often consolidates them. A token step of demo-mqar makes about a hundred such
// small tensors, and `perf` put a tenth of the step in malloc and free (issue 20). This allocator
// keeps freed blocks of up to 1 MB in free lists per power-of-two size, so that the next tensor of
// that size takes one back: demo-mqar's step went from 110 to 98 µs a token, with the same bits.
// Being the CPU allocator, it also counts what a CpuMemoryWatch watches (cpu_memory_watch.h).
#pragma once
#include <cstddef>

namespace memscope::model {

// Makes the cache LibTorch's CPU allocator for this process; call once, early in main(), before
// any thread makes tensors. Blocks larger than 1 MB, and blocks beyond 128 MB held in the cache,
// go straight back to malloc. A no-op where MEMSCOPE_SMALL_BLOCK_CACHE=0 is set (to measure
// without it) and where the cache is not supported (below).
void install_small_block_cache();

// False under AddressSanitizer, whose use-after-free checks a cache would blind, and against
// LibTorch 2.3 or later, whose allocator interface the cache is not built for.
bool small_block_cache_supported();

// What the cache holds now, for tests and benches.
struct SmallBlockCacheStats {
  bool installed = false;
  std::size_t cached_bytes = 0;  // in free lists
  std::size_t reused = 0;        // allocations served from a free list so far
};
SmallBlockCacheStats small_block_cache_stats();

}  // namespace memscope::model
