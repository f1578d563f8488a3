// How many threads the math may use. torch::set_num_threads sets ATen's OpenMP pool only; Debian's
// LibTorch calls OpenBLAS (its pthreads build), whose own pool keeps the machine's core count and
// spins in sched_yield while it waits. On a busy 2-core machine that made one chunkwise MLP-memory
// forward 66× slower with "--threads 1" than with OPENBLAS_NUM_THREADS=1 (214 against 14,102
// tokens/s, memory_bench, issue 20). This sets both.
#pragma once

namespace memscope::model {

// n ≥ 1: ATen's intra-op threads and, where the process has OpenBLAS, its threads too.
void set_compute_threads(int n);

}  // namespace memscope::model
