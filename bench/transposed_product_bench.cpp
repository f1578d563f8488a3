// A product with a transposed weight, x·Wᵀ over a stack of weights (issue 20's small products), as
// the deep memories' reads and backward take it: batched_matmul on the Wᵀ view (below 16 rows of x
// it reads Wᵀ in place through small_gemm_nt; from 16 on it takes the transposed product, the
// line's "route") against
//   - at::matmul on the same view, ATen's route, which eager PyTorch takes;
//   - batched_matmul on a row-major copy of Wᵀ, the product alone, as if W were stored transposed
//     (the copy is made once, untimed).
// The stack is HOPE's: 16 sequences × 5 memories of W [256,64] (5.2 MB), read as Wᵀ [64,256] or as
// W₂ᵀ [256,64] (--side 2). One thread. One JSON line per row count m: the medians of --reps rounds
// of --calls products each, their ratios, and GFLOP/s against this core's sgemm peak.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "bench/sgemm_peak.h"
#include "model/memory/batched_matmul.h"
#include "model/util/compute_threads.h"

using memscope::bench::median;
using memscope::bench::seconds_of;
using memscope::model::batched_matmul;

int main(int argc, char** argv) {
  int64_t reps = 7, calls = 20, side = 1;
  memscope::bench::BenchFlags flags("transposed_product_bench");
  flags.add("--reps", reps).add("--calls", calls).add("--side", side);
  if (!flags.parse(argc, argv)) return 2;
  memscope::model::set_compute_threads(1);  // ATen and OpenBLAS, as the eager side runs
  torch::manual_seed(0);
  const int64_t rows = side == 2 ? 64 : 256, cols = side == 2 ? 256 : 64;  // W [rows, cols]
  const at::Tensor w = torch::randn({16, 5, rows, cols});
  const at::Tensor w_t = w.transpose(-1, -2);  // the view the products take: [cols, rows], column-major
  const at::Tensor w_t_rows = w_t.contiguous();
  const double peak = memscope::bench::sgemm_peak(3);
  for (const int64_t m : {1, 2, 4, 5, 8, 12, 16}) {
    const at::Tensor x = torch::randn({16, 5, m, cols});
    auto timed = [&](const std::function<at::Tensor()>& product) {
      product();  // warm: the first call allocates
      std::vector<double> seconds;
      for (int64_t r = 0; r < reps; ++r)
        seconds.push_back(seconds_of([&] {
                            for (int64_t c = 0; c < calls; ++c) product();
                          }) /
                          static_cast<double>(calls));
      return median(seconds);
    };
    const double ours = timed([&] { return batched_matmul(x, w_t); });
    const double aten = timed([&] { return at::matmul(x, w_t); });
    const double row_major = timed([&] { return batched_matmul(x, w_t_rows); });
    const double flops = 2.0 * static_cast<double>(x.size(0) * x.size(1) * m * cols * rows);
    const double error = (batched_matmul(x, w_t) - at::matmul(x, w_t)).abs().max().item<double>();
    nlohmann::json j;
    j["bench"] = "transposed_product";
    j["x"] = x.sizes().vec();
    j["w_t"] = w_t.sizes().vec();
    j["route"] = m < 16 ? "in place (small_gemm_nt)" : "transposed product";
    j["batched_matmul_ms"] = ours * 1e3;
    j["aten_matmul_ms"] = aten * 1e3;
    j["row_major_copy_ms"] = row_major * 1e3;
    j["aten_over_batched_matmul"] = aten / ours;
    j["row_major_over_batched_matmul"] = row_major / ours;
    j["batched_matmul_gflops"] = flops / ours / 1e9;
    j["sgemm_peak_gflops"] = peak;
    j["max_abs_difference_from_aten"] = error;
    std::cout << j.dump() << std::endl;
  }
  return 0;
}
