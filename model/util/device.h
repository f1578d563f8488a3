// Which device the model runs on (DESIGN principle 7: one code path for CPU and CUDA).
#pragma once
#include <string>

#include <c10/core/Device.h>

namespace memscope::model {

// "auto" picks CUDA when LibTorch has it and a GPU is visible, else the CPU. "cpu", "cuda" and
// "cuda:N" are taken as given; asking for CUDA without it is a UserError.
c10::Device pick_device(const std::string& request = "auto");

// The device new models are built on and run on (build_model, Trainer), for the whole process,
// as torch.set_default_device is in Python. It starts as $MEMSCOPE_DEVICE (any pick_device
// request) when that is set, else the CPU; the CLI's and the GUI's --device set it.
c10::Device default_device();
void set_default_device(const c10::Device& device);

// One line for humans, e.g. "cpu (LibTorch 1.13.0, threads 2)".
std::string describe_device(const c10::Device& device);

}  // namespace memscope::model
