// Where the CPU runs its own forms of the model's math in place of the ATen forms a GPU runs: the
// fused steps and chunkwise forms with their written-out backwards, the one-token attention,
// RMSNorm and Newton–Schulz; the linear memory's chunks one by one where a GPU scans them at once
// (linear_chunk_scan.h); at::cumprod where a GPU takes running_products (linear_scan.h). Each
// site's other conditions (dtype, grad mode, set_fused_step) still apply.
//
// ScopedAtenForms makes the CPU run a GPU's forms, in the whole process while it lives: the CPU
// tests use it to check, here, the code a GPU runs, e.g. for the host reads a CUDA graph cannot
// capture (host_reads.h, cuda_graph.h). The probes' CPU kernels are not switched.
//
// MEMSCOPE_CPU_KERNELS=0 does the same for a whole run: `memscope`, `memscope-cli` or the tests
// (README "The GPU's forms on the CPU"), to tell a CPU kernel's result from the ATen form's, or to
// run every test through the code a GPU runs.
#pragma once
#include <c10/core/Device.h>

namespace at {
class Tensor;
}

namespace memscope::model {

// Whether work on `device` may take the CPU's own kernels: on the CPU, unless ScopedAtenForms lives.
bool cpu_kernels_on(const c10::Device& device);

// Whether `t` is a defined, strided float32 tensor that the CPU's own kernels may take (above).
bool cpu_kernel_float(const at::Tensor& t);

class ScopedAtenForms {
 public:
  ScopedAtenForms();
  ~ScopedAtenForms();
  ScopedAtenForms(const ScopedAtenForms&) = delete;
  ScopedAtenForms& operator=(const ScopedAtenForms&) = delete;
};

}  // namespace memscope::model
