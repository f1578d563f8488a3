// Which ops in a piece of work read a device tensor's values back to the host (issue 23).
//
// Such a read waits for the device: `item()`, `nonzero()` (and so boolean indexing and
// masked_select), `unique`, `equal`, and any copy of device values to the host. Inside a CUDA
// graph's capture it is an error that leaves the capture half-made, so CudaGraph::capture watches
// its warm-up pass with this and refuses before capturing, naming the ops. A copy from the host to
// the device is named too: a graph would replay it from the same host memory, or fail to record it.
// On a CUDA device the list is not the only word: c10 itself says when a call waited for the GPU
// (its sync debug mode, switched on while the watch lives), and any such call the list missed is
// named too ("aten::foo (a synchronising CUDA call)"), as is one outside any op (a stream's
// synchronise). The watching thread's other warnings go on to its handler as before.
// The CPU tests watch the CPU instead: with the ATen forms a GPU runs (cpu_kernels.h), a read the
// CPU makes there is one the GPU would make. Copies and c10's word are the exception, seen on a GPU
// alone.
//
// The watch sees every op this thread runs while it lives, and the backward's too, on whichever
// autograd thread runs it (a thread-local observer travels with autograd's thread-local state), and
// no other thread's. Up to four watches live at once; a fifth waits. A watch ends on the thread that
// made it (one ended elsewhere keeps its slot for good), and watches on one thread end in the
// reverse order of their making, as scopes do.
#pragma once
#include <c10/core/DeviceType.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace memscope::model {

class HostReadWatch {
 public:
  // Watches for reads of tensors on `device`.
  explicit HostReadWatch(c10::DeviceType device);
  ~HostReadWatch();
  HostReadWatch(const HostReadWatch&) = delete;
  HostReadWatch& operator=(const HostReadWatch&) = delete;

  // The reads seen so far, each named with the op our code called ahead of it where that differs
  // ("aten::item -> aten::_local_scalar_dense", "aten::to -> aten::copy_ (device to host)"), → calls.
  std::map<std::string, int64_t> reads() const;
  bool any() const { return !reads().empty(); }
  // "aten::item -> aten::_local_scalar_dense (1 call), aten::nonzero (3 calls)"; empty when there
  // were none.
  std::string summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memscope::model
