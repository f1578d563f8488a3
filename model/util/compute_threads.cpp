#include "model/util/compute_threads.h"

#include <ATen/Parallel.h>

// OpenBLAS's own setter, present only when OpenBLAS is loaded (Debian's LibTorch): a weak
// reference is null elsewhere (pip's LibTorch uses MKL, whose threads follow ATen's).
extern "C" void openblas_set_num_threads(int n) __attribute__((weak));

namespace memscope::model {

void set_compute_threads(int n) {
  if (n < 1) return;
  at::set_num_threads(n);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
}

}  // namespace memscope::model
