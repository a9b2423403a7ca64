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

namespace kiln::cpu {

/// Elements summed in float lanes before they are added into double.
inline constexpr int64_t kNormFlush = 1024;

/// sum over i of (x[i] - shift).
double rowSumBf16(const uint16_t* x, int64_t n, float shift);

/// sum over i of (x[i] - mean)^2.
double rowSqDevBf16(const uint16_t* x, int64_t n, float mean);

/// Adds sum g[i] to *sum_g and sum g[i] * (x[i] - mean) to *dot.
void rowGradSumsBf16(const uint16_t* g, const uint16_t* x, int64_t n, float mean, double* sum_g, double* dot);

/// y[i] = bf16(x[i] * scale + shift).
void rowAffineBf16(const uint16_t* x, uint16_t* y, int64_t n, float scale, float shift);

/// gx[i] = bf16((g[i] - grad_mean - (x[i] - mean) * k) * scale): batch
/// norm's input gradient.
void rowNormGradBf16(const uint16_t* g, const uint16_t* x, uint16_t* gx, int64_t n, float grad_mean, float mean,
                     float k, float scale);

/// Mean and biased variance of `groups` runs of `run` bf16 elements,
/// `stride` apart (one channel of an [N, C, ...] tensor): the mean of the
/// values shifted by the first one, then the squared deviations from it
/// (two passes, as norm_moments.h's). No elements: mean 0, variance NaN.
std::pair<double, double> momentsBf16(const uint16_t* x, int64_t groups, int64_t run, int64_t stride);

}  // namespace kiln::cpu
