#include "model/util/cuda_graph.h"

#include <optional>
#include <stdexcept>

#include "model/util/cpu_kernels.h"
#include "model/util/host_reads.h"

#ifdef MEMSCOPE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace memscope::model {

#ifdef MEMSCOPE_CUDA
struct CudaGraph::Impl {
  // Made at the capture: PyTorch 2.x's constructor asks for the current CUDA stream, which a CPU
  // model in a CUDA build (a machine without a GPU, say) must not.
  std::optional<at::cuda::CUDAGraph> graph;
};
bool CudaGraph::available() { return true; }
#else
struct CudaGraph::Impl {};
bool CudaGraph::available() { return false; }
#endif

namespace {

// The warm-up runs the body's work eagerly. A read of the device by the host in it would end the
// capture half-made (a stream cannot wait while it records), so it is refused here, by name.
void warm_up_watched(const c10::Device& device, const std::function<void()>& warm_up) {
  HostReadWatch watch(device.type());
  warm_up();
  if (watch.any())
    throw std::runtime_error(
        "its work reads the device back on the host, which a CUDA graph cannot capture: " + watch.summary());
}

}  // namespace

CudaGraph::CudaGraph() : impl_(std::make_unique<Impl>()) {}
CudaGraph::~CudaGraph() = default;

void CudaGraph::capture(const c10::Device& device, const std::function<void()>& warm_up,
                        const std::function<void()>& body) {
  if (!device.is_cuda()) {
    // Nothing to record. Where the CPU stands in for a GPU, running its forms (ScopedAtenForms,
    // cpu_kernels.h), the warm-up still runs, watched: that is how the CPU tests find the reads a
    // GPU's capture would fail on.
    if (!cpu_kernels_on(device)) warm_up_watched(device, warm_up);
    throw std::invalid_argument("a CUDA graph records CUDA work, and this model is on " + device.str());
  }
#ifdef MEMSCOPE_CUDA
  // The model's GPU, whichever is current: the streams below are the current device's.
  c10::cuda::OptionalCUDAGuard on_device;
  if (device.has_index()) on_device.set_index(device.index());
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    warm_up_watched(device, warm_up);
    at::cuda::CUDAGraph& graph = impl_->graph.emplace();
    graph.capture_begin();
    try {
      body();
    } catch (...) {
      try {
        graph.capture_end();  // leaves the stream out of capture mode
      } catch (...) {
        // The capture's own failure is the one to report.
      }
      throw;
    }
    graph.capture_end();
  }
  at::cuda::CUDAEvent captured;
  captured.record(side);
  captured.block(current);
#else
  (void)body;
  throw std::logic_error("this build has no CUDA graphs");
#endif
}

void CudaGraph::replay() {
#ifdef MEMSCOPE_CUDA
  if (!impl_->graph) throw std::logic_error("a CUDA graph replayed before its capture");
  impl_->graph->replay();
#else
  throw std::logic_error("this build has no CUDA graphs");
#endif
}

}  // namespace memscope::model
