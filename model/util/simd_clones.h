// MEMSCOPE_SIMD_CLONES before a hot loop's function builds it for AVX-512 and AVX2 beside the
// portable copy, and the loader picks the best one this CPU runs (GCC's and Clang's
// target_clones). Only on x86-64; elsewhere (an aarch64 GPU host) there is the one portable copy.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MEMSCOPE_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MEMSCOPE_SIMD_CLONES
#endif
