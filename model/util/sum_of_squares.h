// Σ x² and Σ (x − y)² of float arrays, in double: the fused steps' record sums (Σ S_t² and
// Σ (M_t − M_{t−1})², StepRecord::weight_squares) and the probes' Frobenius norms. One copy for
// both, so a norm reads the same whether the step or the probes summed it.
//
// Thirty-two partial sums in a fixed order, added in order at the end: the same bits from the
// AVX-512, AVX2 and portable copies (simd_clones.h) and whatever flags the caller's file is built
// with. A single running double sum waits four cycles on each add: the fused window and linear
// steps summed that way (their files are not built with reassociation), and demo-mqar's record of
// a probed step cost 9.8-11.6 µs on the AMD VM, 7.4-8.0 µs with these (README "The two vCPUs,
// shared or not").
#pragma once

#include <cstdint>

namespace memscope::model {

double squares_of(const float* x, int64_t n);                             // Σ x²
double squares_of_difference(const float* x, const float* y, int64_t n);  // Σ (x − y)²

}  // namespace memscope::model
