// The device the tests build models on: the CPU, or the GPU under MEMSCOPE_TEST_DEVICE=cuda
// (tests/catch_main.cpp), with the tolerances each dtype allows there.
#pragma once
#include <torch/torch.h>

#include "model/util/device.h"

namespace memscope::test {

inline c10::Device test_device() { return model::default_device(); }

inline torch::TensorOptions on_test_device(torch::Dtype dtype) {
  return torch::TensorOptions().dtype(dtype).device(test_device());
}

}  // namespace memscope::test
