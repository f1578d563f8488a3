// Runs a piece of a test under bf16 autocast on the test device (train.bf16_autocast,
// model/util/autocast.h), for the checks that a module keeps its own precision inside.
#pragma once
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "model/util/autocast.h"
#include "support/test_device.h"

namespace memscope::test {

// What `run` returns under bf16 autocast; checks that autocast is still on after it, as a scope
// that turns it off inside (AutocastOff) must leave it.
template <typename Run>
auto under_bf16_autocast(Run run) {
  model::Bf16Autocast autocast(test_device().type());
  auto out = run();
  const torch::Tensor square = torch::ones({2, 2}, torch::TensorOptions().device(test_device()));
  CHECK(torch::matmul(square, square).scalar_type() == torch::kBFloat16);
  return out;
}

}  // namespace memscope::test
