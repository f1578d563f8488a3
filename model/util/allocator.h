// glibc's malloc returns every block of 128 KB or more to the kernel when it is freed (mmap), and
// trims the heap top at 128 KB. The chunkwise Muon form allocates and frees ~4 MB of per-token
// temporaries per chunk, so each one is unmapped and faulted back in: 75k minor page faults in
// `memory_bench --quick --only linear` (issue 20). Keeping such blocks in the heap halves the
// faults and makes chunkwise Muon ~10% faster. Call once at the start of main().
//
// The heap also grows for as long as the engine's frame ring fills (its first ~10,000 Titans-MLP
// tokens), one 4 KB page fault at a time. On the PVM virtual machine where this was measured a
// fault costs 10-25 µs, so the heap grows 64 MB at a time and each growth is advised transparent
// huge pages (advise_heap_growth): a 2 MB fault per 2 MB instead of 512 (README "Page faults on a
// PVM VM"). The heap's start-up part is advised too.
#pragma once

namespace memscope::model {

// Raises glibc's mmap and trim thresholds (256 MB and 512 MB) and its top pad (64 MB), advises the
// heap so far, and starts advise_heap_growth(); a no-op on other C libraries. A setting the
// environment makes stands (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_);
// MEMSCOPE_HEAP_HUGE_PAGES=0 leaves the heap's pages as the kernel gives them.
void keep_large_blocks_in_heap();

// Advises huge pages (madvise MADV_HUGEPAGE) for the heap grown since the last call. Cheap when it
// has not grown: one comparison. Called where the heap grows (the frame ring's push); any thread.
void advise_heap_growth();

}  // namespace memscope::model
