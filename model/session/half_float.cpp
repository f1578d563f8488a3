#include "model/session/half_float.h"

#include <cstring>

namespace memscope::model {

namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

std::uint16_t float_to_half(float value) {
  const std::uint32_t u = bits_of(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // inf or NaN; a NaN keeps a quiet payload bit so it stays NaN
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x0200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal, value / 2^-24 rounded to an integer.
    // Adding 0.5f (2^-1) puts the result's units in the float's low mantissa bits, so the FPU's
    // own round-to-nearest-even does the rounding.
    const float scaled = float_of(abs) + 0.5f;
    return static_cast<std::uint16_t>(sign | (bits_of(scaled) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 → 15) and round the 13 dropped mantissa bits to nearest even.
  const std::uint32_t odd = (abs >> 13) & 1u;
  const std::uint32_t rounded = abs + 0xfffu + odd - (112u << 23);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

float half_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // ±0 and subnormals: mantissa · 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * float_of(0x33800000u);
    return float_of(sign | bits_of(magnitude));
  }
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::uint16_t float_to_bf16(float value) {
  const std::uint32_t u = bits_of(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  const std::uint32_t odd = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + odd) >> 16);
}

float bf16_to_float(std::uint16_t bits) { return float_of(static_cast<std::uint32_t>(bits) << 16); }

}  // namespace memscope::model
