#include "model/util/cuda_graph.h"

#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

#include "model/util/cpu_kernels.h"
#include "model/util/host_reads.h"

#ifdef MEMSCOPE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace memscope::model {

#ifdef MEMSCOPE_CUDA
namespace {

// Capture streams, each held by one live graph at a time. PyTorch's own pool hands its 32 streams
// round, so two live graphs could share one, and PyTorch after 2.11 frees the cuBLAS workspaces of
// a graph's capture stream when the graph is destroyed, though another live graph captured there
// still uses them (pytorch/pytorch#193402): the engine drops the inspect step's graphs at every
// training step while the training pass's lives on. A new stream for every graph would not do
// either: up to 2.11 cuBLAS keeps a workspace for every stream it has run on, for good. So a graph
// takes a stream no live graph holds and gives it back when it goes: as many streams as graphs
// ever lived at once (a handful), never destroyed.
class CaptureStreams {
 public:
  static cudaStream_t take(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> hold(lock());
    std::vector<Free>& free = idle();
    for (auto it = free.begin(); it != free.end(); ++it)
      if (it->device == device) {
        const cudaStream_t stream = it->stream;
        free.erase(it);
        ++held_;
        return stream;
      }
    cudaStream_t stream = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));  // on the current device
    ++made_;
    ++held_;
    return stream;
  }
  static void give_back(c10::DeviceIndex device, cudaStream_t stream) {
    std::lock_guard<std::mutex> hold(lock());
    idle().push_back({device, stream});
    --held_;
  }
  static CudaGraph::StreamCount count() {
    std::lock_guard<std::mutex> hold(lock());
    return {made_, held_, static_cast<int>(idle().size())};
  }

 private:
  struct Free {
    c10::DeviceIndex device;
    cudaStream_t stream;
  };
  // Both outlive every graph, at exit too: a graph a static owns may go after them.
  static std::mutex& lock() {
    static auto* m = new std::mutex();
    return *m;
  }
  static std::vector<Free>& idle() {
    static auto* streams = new std::vector<Free>();
    return *streams;
  }
  static inline int made_ = 0, held_ = 0;
};

}  // namespace

struct CudaGraph::Impl {
  // Made at the capture: PyTorch 2.x's constructor asks for the current CUDA stream, which a CPU
  // model in a CUDA build (a machine without a GPU, say) must not.
  std::optional<at::cuda::CUDAGraph> graph;
  // The stream it is captured on, this graph's alone while it lives (CaptureStreams).
  cudaStream_t stream = nullptr;
  c10::DeviceIndex stream_device = -1;

  ~Impl() { release(); }

  // The graph first, then its stream, whose cuBLAS workspace a later PyTorch frees with it.
  void release() {
    graph.reset();
    if (stream) CaptureStreams::give_back(stream_device, stream);
    stream = nullptr;
  }

  c10::cuda::CUDAStream capture_stream(c10::DeviceIndex device) {
    if (stream && stream_device != device) release();
    if (!stream) {
      stream = CaptureStreams::take(device);
      stream_device = device;
    }
    return c10::cuda::getStreamFromExternal(stream, device);
  }
};
bool CudaGraph::available() { return true; }
CudaGraph::StreamCount CudaGraph::capture_streams() { return CaptureStreams::count(); }
#else
struct CudaGraph::Impl {};
bool CudaGraph::available() { return false; }
CudaGraph::StreamCount CudaGraph::capture_streams() { return {}; }
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
  const c10::cuda::CUDAStream side = impl_->capture_stream(current.device_index());
  at::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    // A graph captured before on this stream goes first: a later PyTorch frees the stream's cuBLAS
    // workspaces with it, which the warm-up is to make outside the new graph.
    impl_->graph.reset();
    warm_up_watched(device, warm_up);
    at::cuda::CUDAGraph& graph = impl_->graph.emplace();
    try {
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
    } catch (...) {
      // Half-made: not to be replayed. Where CUDA could not end the capture cleanly, PyTorch up to
      // some 2.x leaves its allocator believing the capture is still under way (its capture_end
      // throws before it hands the pool back; later versions' reset() does that). Reaching into
      // the allocator from here could release the pool twice on those, so it is left to PyTorch;
      // the warm-up's watch is what makes such a failure rare.
      impl_->graph.reset();
      throw;
    }
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
