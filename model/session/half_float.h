// IEEE binary16 and bfloat16 conversions without torch, for the session writer's matrix storage
// (record.matrix_dtype). Round to nearest even, as torch and numpy do; NaN stays NaN and values
// past the range become ±inf.
#pragma once
#include <cstdint>

namespace memscope::model {

std::uint16_t float_to_half(float value);
float half_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t bits);

}  // namespace memscope::model
