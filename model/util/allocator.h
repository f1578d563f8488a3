// glibc's malloc returns every block of 128 KB or more to the kernel when it is freed (mmap), and
// trims the heap top at 128 KB. The chunkwise Muon form allocates and frees ~4 MB of per-token
// temporaries per chunk, so each one is unmapped and faulted back in: 75k minor page faults in
// `memory_bench --quick --only linear` (issue 20). Keeping such blocks in the heap halves the
// faults and makes chunkwise Muon ~10% faster. Call once at the start of main().
#pragma once

namespace memscope::model {

// Raises glibc's mmap and trim thresholds (256 MB and 512 MB); a no-op on other C libraries and
// where MALLOC_MMAP_THRESHOLD_ is set in the environment (the user's choice stands).
void keep_large_blocks_in_heap();

}  // namespace memscope::model
