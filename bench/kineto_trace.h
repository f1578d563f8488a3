#pragma once
// One piece of work under PyTorch's Kineto profiler, its CPU ops, CUDA runtime calls and kernels
// saved as a Chrome trace (the format torch.profiler's export_chrome_trace writes), so that
// bench/eager/trace_summary.py reads memscope's and eager PyTorch's traces alike.
//
// LibTorch 2.x only: Debian's 1.13 is built without Kineto, and its profiler API differs.
#include <torch/version.h>

#include <functional>
#include <string>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace memscope::bench {

// Runs `work` once under the profiler and writes the trace to `path`. Returns "" or why not.
inline std::string save_kineto_trace(const std::string& path, const std::function<void()>& work) {
#if TORCH_VERSION_MAJOR >= 2
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
  try {
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
    work();
    auto result = prof::disableProfiler();
    if (!result) return "the profiler returned no result";
    result->save(path);
  } catch (const std::exception& e) {
    return std::string("profiling failed: ") + e.what();
  }
  return "";
#else
  (void)path;
  (void)work;
  return "profiling needs LibTorch 2.x (this is " TORCH_VERSION ", built without Kineto)";
#endif
}

}  // namespace memscope::bench
