// The memory's depthwise causal convolution over time (SPEC §2, Titans §4.4), shared by the memory
// layer's projections and HOPE's chunkwise form.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// padded [B, T + K − 1, C] (the K − 1 carried tokens first), taps [C, K]: out[b,t,c] =
// Σ_k padded[b, t + k, c]·taps[c, k], summed in k's order. Not unfold(1, K, 1)'s product summed over
// the taps: its [B,T,C,K] temporaries and its reduction over a strided axis cost the MLP memory's
// d256 training step 7% of its time (bench/device_bench --op-times), and K shifted products in
// ATen still 5%, with a zero-filled padded-size gradient per tap. causal_conv.cpp says what runs.
at::Tensor causal_depthwise_conv(const at::Tensor& padded, const at::Tensor& taps);

}  // namespace memscope::model
