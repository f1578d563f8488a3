// One CUDA graph, for the engine's inspect step (model/nn/graphed_step.h) and the training pass
// (model/train/graphed_train_pass.h): captured on a stream no other live graph is captured on,
// replayed on the current one.
// Without CUDA in this build, available() is false, and capture() and replay() throw.
#pragma once
#include <c10/core/Device.h>

#include <functional>
#include <memory>

namespace memscope::model {

class CudaGraph {
 public:
  CudaGraph();
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Whether this build can capture CUDA graphs.
  static bool available();
  // The capture streams this process has made: each live graph holds one of its own, and a graph
  // gone leaves its stream idle for the next. All 0 without CUDA.
  struct StreamCount {
    int made = 0, held = 0, idle = 0;
  };
  static StreamCount capture_streams();

  // Records the kernels `body` launches. CUDA graphs cannot be captured on the legacy default
  // stream, so this runs on a side stream, after the current stream's work and before its next:
  // the graph's own while it lives (PyTorch after 2.11 frees a capture stream's cuBLAS workspaces
  // with its graph).
  // A graph captured before by this object is dropped first. `warm_up` runs next, eagerly, on the
  // same side stream: cuBLAS's handles and workspaces and the autograd engine's per-device state
  // are made there, outside the graph. It is watched for reads of the device by the host
  // (host_reads.h), which would fail the capture half-way: any refuses it before it begins
  // (std::runtime_error, naming the ops). What `body` or the capture throws is rethrown, with the
  // stream out of capture mode and no graph to replay. `device` is where the work lies: a graph records
  // CUDA work only, so any other is refused (std::invalid_argument) before anything runs, or, where
  // the CPU runs a GPU's forms for a test (ScopedAtenForms), after the watched warm-up. Of a CPU
  // model's work a graph would record nothing, and every replay would hand back stale outputs.
  void capture(const c10::Device& device, const std::function<void()>& warm_up,
               const std::function<void()>& body);

  // Launches the captured kernels on the current stream.
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memscope::model
