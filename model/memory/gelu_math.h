// The exact (erf) GELU and its derivative over float32 arrays, vectorised (issue 20). glibc's erff
// is a scalar call with branches, 17–23 ns an element on the AMD VM, and ATen's vectorised erf
// (SLEEF) 4.2 ns; at d = 64 the fused MLP step evaluates 3 × 4d of them per head and token, and the
// fused chunkwise form 3 × 4d per key. These take 1.5 ns (GELU) and 2.2 ns (its derivative) an
// element there, within 2.5 ulp of the correctly rounded erf (gelu_math.cpp says how).
#pragma once
#include <cstdint>

namespace memscope::model {

// out[i] = GELU(h[i]) = ½h(1 + erf(h/√2)), as exact_gelu.cpp's ATen form. out may be h.
void gelu_array(const float* h, float* out, int64_t count);

// x[i] *= GELU'(h[i]) = Φ(h) + h·φ(h), as exact_gelu_derivative.
void multiply_by_gelu_derivative(const float* h, float* x, int64_t count);

// x[i] *= GELU''(h[i]) = φ(h)(2 − h²), for the outer backward through an inner gradient's GELU'.
void multiply_by_gelu_second_derivative(const float* h, float* x, int64_t count);

// erf over an array, for the accuracy test (tests/model/test_fused_mlp_chunkwise.cpp).
void erf_array(const float* x, float* out, int64_t count);

}  // namespace memscope::model
