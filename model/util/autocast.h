// bf16 autocast for a scope on one device type (train.bf16_autocast): the matrix products inside
// run in bfloat16, everything autocast keeps in float32 (reductions, softmax, losses) stays there.
// LibTorch 2.4 renamed the autocast switches (per device type); this is the one place that knows.
#pragma once
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace memscope::model {

// Whether autocast is on for this device type now.
bool autocast_enabled(c10::DeviceType device);

class Bf16Autocast {
 public:
  explicit Bf16Autocast(c10::DeviceType device);  // CPU or CUDA
  ~Bf16Autocast();
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  c10::DeviceType device_;
  bool was_enabled_;
  c10::ScalarType was_dtype_;
};

// Autocast off for a scope on one device type, where it was on: the memory's recurrence
// (chunkwise_forward.cpp), whose small products on float32 state would each cast both inputs to
// bfloat16, two more kernels a product, and round what they add to the state.
class AutocastOff {
 public:
  explicit AutocastOff(c10::DeviceType device);
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

  bool was_on() const { return was_enabled_; }

 private:
  c10::DeviceType device_;
  bool was_enabled_;
};

}  // namespace memscope::model
