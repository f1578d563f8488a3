// The device the tests build models on: the CPU, or the GPU under MEMSCOPE_TEST_DEVICE=cuda
// (tests/catch_main.cpp). Tests that loosen a tolerance on CUDA ask test_device().is_cuda().
#pragma once
#include <torch/torch.h>

#include "model/util/device.h"

namespace memscope::test {

inline c10::Device test_device() { return model::default_device(); }

}  // namespace memscope::test
