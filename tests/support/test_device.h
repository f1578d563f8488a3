// The device the tests build models on: the CPU, or the GPU under MEMSCOPE_TEST_DEVICE=cuda
// (tests/catch_main.cpp). Tests that loosen a tolerance on CUDA ask test_device().is_cuda().
#pragma once
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "model/util/cpu_kernels.h"
#include "model/util/device.h"

namespace memscope::test {

inline c10::Device test_device() { return model::default_device(); }

// For the tests of CPU-only code (the fused kernels, whose applies() checks ask for the CPU, and the
// CPU allocator): they run on the CPU under every MEMSCOPE_TEST_DEVICE, since on CUDA the layer
// would take the ATen form they are compared with and the comparison would test nothing.
// False under MEMSCOPE_CPU_KERNELS=0, where the whole run takes a GPU's forms on the CPU
// (cpu_kernels.h): a test of the CPU's own kernels then has nothing to test, and warns so.
inline bool cpu_kernels_testable() {
  if (model::cpu_kernels_on(c10::Device("cpu"))) return true;
  WARN("MEMSCOPE_CPU_KERNELS=0: the CPU's own kernels are off, and this test is of them");
  return false;
}

class ScopedCpuDevice {
 public:
  ScopedCpuDevice() : before_(test_device()) { model::set_default_device(c10::Device("cpu")); }
  ~ScopedCpuDevice() { model::set_default_device(before_); }
  ScopedCpuDevice(const ScopedCpuDevice&) = delete;
  ScopedCpuDevice& operator=(const ScopedCpuDevice&) = delete;

 private:
  c10::Device before_;
};

}  // namespace memscope::test
