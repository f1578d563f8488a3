#include "model/util/allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#if defined(__GLIBC__)
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#endif

namespace memscope::model {

#if defined(__GLIBC__)
namespace {

constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older kernels refuse it (EINVAL), and nothing changes
#endif

// Advises huge pages for [from, to), 2 MB aligned. Where malloc has written already, a 2 MB page
// holds 4 KB ones and would fault in the rest of its 512 one at a time; with `collapse` those are
// made huge pages now (untouched 2 MB pages are skipped, and fault in whole when first written).
void advise_huge_pages(std::uintptr_t from, std::uintptr_t to, bool collapse) {
  if (to <= from) return;
  // Advice only: where the kernel has huge pages off (or not for this range), nothing changes.
  madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
  if (collapse) madvise(reinterpret_cast<void*>(from), to - from, MADV_COLLAPSE);
}

// The main heap is advised up to here (a 2 MB boundary); 0 until keep_large_blocks_in_heap().
std::atomic<std::uintptr_t> g_advised_to{0};

std::uintptr_t heap_top() { return reinterpret_cast<std::uintptr_t>(sbrk(0)); }

// Where the main heap starts ("[heap]" in /proc/self/maps); 0 where it cannot be read.
std::uintptr_t heap_start() {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return 0;
  char line[512];
  std::uintptr_t start = 0;
  while (std::fgets(line, sizeof line, maps))
    if (std::strstr(line, "[heap]")) {
      start = std::strtoull(line, nullptr, 16);
      break;
    }
  std::fclose(maps);
  return start;
}

}  // namespace

void keep_large_blocks_in_heap() {
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 256 << 20);
  if (!std::getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, 512 << 20);
  const char* huge = std::getenv("MEMSCOPE_HEAP_HUGE_PAGES");
  if (huge && std::strcmp(huge, "0") == 0) return;
  // Growth in 64 MB steps, so that an advised growth holds whole 2 MB pages.
  if (!std::getenv("MALLOC_TOP_PAD_")) mallopt(M_TOP_PAD, 64 << 20);
  // What the heap holds already (LibTorch's start-up, mostly), in 4 KB pages: advised, so that the
  // kernel's khugepaged may collapse it in the background. Collapsed here, it added 0.1-0.4 s to
  // every start (`memscope-cli --help`: 0.63 s → 0.71-1.05 s).
  const std::uintptr_t top = heap_top() & ~(kHugePage - 1);
  const std::uintptr_t first = heap_start();
  const std::uintptr_t start = first == 0 ? top : std::min(top, (first + kHugePage - 1) & ~(kHugePage - 1));
  advise_huge_pages(start, top, /*collapse=*/false);
  g_advised_to.store(top, std::memory_order_relaxed);
}

void advise_heap_growth() {
  std::uintptr_t from = g_advised_to.load(std::memory_order_relaxed);
  if (from == 0) return;
  const std::uintptr_t to = heap_top() & ~(kHugePage - 1);
  if (to <= from || !g_advised_to.compare_exchange_strong(from, to, std::memory_order_relaxed)) return;
  advise_huge_pages(from, to, /*collapse=*/true);  // malloc wrote in it between the growth and this call
}

#else

void keep_large_blocks_in_heap() {}
void advise_heap_growth() {}

#endif

}  // namespace memscope::model
