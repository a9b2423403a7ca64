// Vectorized loops of amp's bf16 batch norm (kernels_norm.cpp,
// kernels_norm_grad.cpp) over one contiguous run of a channel: the sums
// its statistics need, the normalization, and the input gradient.
//
// Each reads bf16 and computes in float, compiled for AVX2+FMA and the
// baseline (KILN_SIMD_CLONES). Sums run in 16 float lanes that are added
// into double every kFlush elements, so no float partial holds more than
// kFlush / 16 terms (relative error about 1e-6 at worst, far inside bf16's
// 4e-3) while the loop stays in float vectors: the double-lane loops of
// norm_moments.h converted every bf16 element to double and made batch
// norm compute-bound (ResNet-50 at batch 8: 52 ms forward, 90 ms backward
// per step).
#pragma once

#include <cstdint>
#include <utility>

#include "backend/cpu/cpu_loops.h"

namespace kiln::cpu {

/// Elements summed in float lanes before they are added into double.
inline constexpr int64_t kNormFlush = 1024;

// bf16 overloads of batch norm's per-channel steps (norm_moments.h), which
// the kernels' templates pick for X = BFloat16.

/// Mean and biased variance of `groups` runs of `run` elements, `stride`
/// apart (one channel of an [N, C, ...] tensor): the mean of the values
/// shifted by the first one, then the squared deviations from it (two
/// passes, as the template's). No elements: mean 0, variance NaN.
std::pair<double, double> moments(const BFloat16* x, int64_t groups, int64_t run, int64_t stride);

/// sum(g) and sum(g * (x - mean)) in one pass over each run.
std::pair<double, double> gradSums(const BFloat16* g, const BFloat16* x, int64_t groups, int64_t run, int64_t stride,
                                   double mean);

/// y[i] = bf16(x[i] * scale + shift).
void affineRun(const BFloat16* x, BFloat16* y, int64_t n, float scale, float shift);

/// gx[i] = bf16((g[i] - grad_mean - (x[i] - mean) * k) * scale).
void normGradRun(const BFloat16* g, const BFloat16* x, BFloat16* gx, int64_t n, float grad_mean, float mean, float k,
                 float scale);

}  // namespace kiln::cpu
