// gelu_math.h's arrays. Every function here is branch-free, so that GCC vectorises the loops:
//
// erf(x) = x·P(x²) for |x| ≤ 1, and 1 − e^{−x²}·Q(|x|) for 1 < |x| ≤ 4, both evaluated and the one
// that applies selected; |x| > 4 is clamped to 4, where 1 − erf is 1.5e-8, under half an ulp of 1.
// P (degree 6 in x²) and Q (degree 10 in |x| − 2.5) are least-squares fits refined to equal ripple
// (Lawson's iteration) against double erf and erfc: relative errors 1.2e-9 of erf(x)/x and 1.5e-7
// of erfc(x)·e^{x²}. e^x is the usual x = n ln 2 + r, |r| ≤ ln2/2, with e^r by a degree-6 fit
// (relative error 1.9e-9) and 2^n put into the exponent bits. In float32 erf stays within 2.5 ulp
// of the correctly rounded value (tests/model/test_fused_mlp_chunkwise.cpp sweeps |x| ≤ 6).
//
// NaN propagates (each clamp is a comparison that a NaN fails, and a NaN never reaches a float →
// int conversion); erf(±Inf) = ±1, as glibc's.
//
// Built without reassociation (model/CMakeLists.txt): it would fold the rounding trick
// (x + 1.5·2^23) − 1.5·2^23 and the two halves of ln 2. With -ffp-contract=fast the AVX2 + FMA and
// AVX-512 kernels fuse the polynomials' multiply-adds, so their last bits may differ from the
// portable kernel's.
#include "model/memory/gelu_math.h"

#include <cstring>

namespace memscope::model {

namespace {

// e^x for x ≤ 88; below −87 the result is e^{−87}, which GELU's derivative multiplies by h and
// never notices.
[[gnu::always_inline]] inline float exp_float(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  constexpr float kShift = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer in the low bits
  const float shifted = x * 1.44269504f + kShift;
  float n = shifted - kShift;
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;  // ln 2 in two parts (Cody–Waite)
  float p = 1.383678457e-03f;
  p = p * r + 8.374814538e-03f;
  p = p * r + 4.166822647e-02f;
  p = p * r + 1.666642019e-01f;
  p = p * r + 4.999999208e-01f;
  p = p * r + 1.000000036e+00f;
  p = p * r + 1.000000001e+00f;
  n = n == n ? n : 0.0f;  // a NaN x: p is NaN already; keep the conversion below defined
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;  // 2^n, n in [−126, 127]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

[[gnu::always_inline]] inline float erf_float(float x) {
  const float sign = x < 0.0f ? -1.0f : 1.0f;
  float ax = x * sign;
  ax = ax > 4.0f ? 4.0f : ax;
  const float x2 = ax * ax;
  float p = 7.853773464e-05f;  // |x| ≤ 1: x·P(x²)
  p = p * x2 - 8.010170890e-04f;
  p = p * x2 + 5.188325528e-03f;
  p = p * x2 - 2.685381102e-02f;
  p = p * x2 + 1.128358513e-01f;
  p = p * x2 - 3.761262582e-01f;
  p = p * x2 + 1.128379166e+00f;
  const float small = ax * p;
  const float u = ax - 2.5f;  // 1 < |x| ≤ 4: 1 − e^{−x²}·Q(|x|)
  float q = 1.553953353e-06f;
  q = q * u - 6.357581240e-06f;
  q = q * u + 1.501024095e-05f;
  q = q * u - 5.372893919e-05f;
  q = q * u + 2.116952381e-04f;
  q = q * u - 7.387587310e-04f;
  q = q * u + 2.466991796e-03f;
  q = q * u - 7.999492498e-03f;
  q = q * u + 2.493792617e-02f;
  q = q * u - 7.434757673e-02f;
  q = q * u + 2.108063696e-01f;
  const float large = 1.0f - exp_float(-x2) * q;
  return sign * (ax <= 1.0f ? small : large);
}

constexpr float kSqrtHalf = 0.707106781f, kInvSqrt2Pi = 0.398942280f;  // 1/√2, 1/√(2π)

[[gnu::always_inline]] inline void gelu_loop(const float* h, float* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = 0.5f * h[i] * (1.0f + erf_float(h[i] * kSqrtHalf));
}
[[gnu::always_inline]] inline void derivative_loop(const float* h, float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float v = h[i];
    x[i] *= 0.5f * (1.0f + erf_float(v * kSqrtHalf)) + v * exp_float(-0.5f * v * v) * kInvSqrt2Pi;
  }
}
[[gnu::always_inline]] inline void second_derivative_loop(const float* h, float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float v = h[i], half_square = 0.5f * v * v;
    // Past h²/2 = 87, exp_float's clamp would leave φ at e^{−87}, and (2 − h²) would scale it
    // back up for a diverged h (to Inf·0 = NaN past 1.8e19); there φ(h)(2 − h²) is 0 to float
    // precision. A NaN h fails the test and stays NaN.
    x[i] *= half_square > 87.0f ? 0.0f : exp_float(-half_square) * kInvSqrt2Pi * (2.0f - v * v);
  }
}
[[gnu::always_inline]] inline void erf_loop(const float* x, float* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = erf_float(x[i]);
}

// One copy of each loop per instruction set, chosen once (as small_gemm.cpp's kernels).
struct Kernels {
  void (*gelu)(const float*, float*, int64_t);
  void (*derivative)(const float*, float*, int64_t);
  void (*second_derivative)(const float*, float*, int64_t);
  void (*erf)(const float*, float*, int64_t);
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx512f,fma")]] void gelu_avx512(const float* h, float* o, int64_t n) { gelu_loop(h, o, n); }
[[gnu::target("avx512f,fma")]] void derivative_avx512(const float* h, float* x, int64_t n) {
  derivative_loop(h, x, n);
}
[[gnu::target("avx512f,fma")]] void second_derivative_avx512(const float* h, float* x, int64_t n) {
  second_derivative_loop(h, x, n);
}
[[gnu::target("avx512f,fma")]] void erf_avx512(const float* x, float* o, int64_t n) { erf_loop(x, o, n); }
[[gnu::target("avx2,fma")]] void gelu_avx2(const float* h, float* o, int64_t n) { gelu_loop(h, o, n); }
[[gnu::target("avx2,fma")]] void derivative_avx2(const float* h, float* x, int64_t n) {
  derivative_loop(h, x, n);
}
[[gnu::target("avx2,fma")]] void second_derivative_avx2(const float* h, float* x, int64_t n) {
  second_derivative_loop(h, x, n);
}
[[gnu::target("avx2,fma")]] void erf_avx2(const float* x, float* o, int64_t n) { erf_loop(x, o, n); }
#endif
void gelu_portable(const float* h, float* o, int64_t n) { gelu_loop(h, o, n); }
void derivative_portable(const float* h, float* x, int64_t n) { derivative_loop(h, x, n); }
void second_derivative_portable(const float* h, float* x, int64_t n) { second_derivative_loop(h, x, n); }
void erf_portable(const float* x, float* o, int64_t n) { erf_loop(x, o, n); }

const Kernels& kernels() {
  static const Kernels chosen = [] {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f"))
      return Kernels{&gelu_avx512, &derivative_avx512, &second_derivative_avx512, &erf_avx512};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return Kernels{&gelu_avx2, &derivative_avx2, &second_derivative_avx2, &erf_avx2};
#endif
    return Kernels{&gelu_portable, &derivative_portable, &second_derivative_portable, &erf_portable};
  }();
  return chosen;
}

}  // namespace

void gelu_array(const float* h, float* out, int64_t count) { kernels().gelu(h, out, count); }
void multiply_by_gelu_derivative(const float* h, float* x, int64_t count) {
  kernels().derivative(h, x, count);
}
void multiply_by_gelu_second_derivative(const float* h, float* x, int64_t count) {
  kernels().second_derivative(h, x, count);
}
void erf_array(const float* x, float* out, int64_t count) { kernels().erf(x, out, count); }

}  // namespace memscope::model
