// Which device the model runs on (DESIGN principle 7: one code path for CPU and CUDA).
#pragma once
#include <string>

#include <c10/core/Device.h>

namespace memscope::model {

// "auto" picks CUDA when LibTorch has it and a GPU is visible, else the CPU. "cpu", "cuda" and
// "cuda:N" are taken as given; asking for CUDA without it is a UserError.
c10::Device pick_device(const std::string& request = "auto");

// One line for humans, e.g. "cpu (LibTorch 1.13.0, threads 2)".
std::string describe_device(const c10::Device& device);

}  // namespace memscope::model
