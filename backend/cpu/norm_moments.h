// Per-slice sums of the normalization kernels (batch, layer and group norm,
// forward and backward), in double, and batch norm's per-channel loops.
//
// Each sum runs in eight independent lanes (element i goes to lane i % 8
// of its run, the ragged tail to lane 0) combined pairwise at the end: the
// adds no longer wait on each other and the lanes map onto vector
// registers, where one running double made every element wait for the
// previous add (batch_norm ran at a quarter of memory speed). The order
// depends only on the shape, never on the thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "backend/cpu/cpu_loops.h"

namespace kiln::cpu {

inline constexpr int kNormLanes = 8;

/// Adds f(i) for i in [0, n) to `lanes`: i to lane i % 8, the tail to lane 0.
template <class F>
KILN_SIMD_CLONES void addLanes(double* lanes, int64_t n, F f) {
  double a[kNormLanes];
  for (int k = 0; k < kNormLanes; ++k) a[k] = lanes[k];
  int64_t i = 0;
  for (; i + kNormLanes <= n; i += kNormLanes)
    for (int k = 0; k < kNormLanes; ++k) a[k] += f(i + k);
  for (; i < n; ++i) a[0] += f(i);
  for (int k = 0; k < kNormLanes; ++k) lanes[k] = a[k];
}

inline double combineLanes(const double* a) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

/// Sum of f(p, i) over `groups` runs of `run` elements, `stride` apart
/// (p points at the run, i indexes it).
template <class T, class F>
double sumRuns(const T* x, int64_t groups, int64_t run, int64_t stride, F f) {
  double lanes[kNormLanes] = {};
  for (int64_t g = 0; g < groups; ++g) {
    const T* p = x + g * stride;
    addLanes(lanes, run, [&](int64_t i) { return f(p, i); });
  }
  return combineLanes(lanes);
}

/// Mean and biased variance of `groups` runs of `run` elements, `stride`
/// apart: two passes (mean, then squared deviations), so a large mean does
/// not cancel the variance away. No elements: mean 0, variance NaN.
template <typename T>
std::pair<double, double> moments(const T* x, int64_t groups, int64_t run, int64_t stride) {
  const double count = static_cast<double>(groups * run);
  if (count == 0) return {0.0, std::nan("")};
  const double mean = sumRuns(x, groups, run, stride, [](const T* p, int64_t i) { return double(p[i]); }) / count;
  const double sq = sumRuns(x, groups, run, stride, [mean](const T* p, int64_t i) {
    const double d = double(p[i]) - mean;
    return d * d;
  });
  return {mean, sq / count};
}

// The per-channel steps of batch norm over an [N, C, ...] tensor, as
// kernels_norm.cpp / kernels_norm_grad.cpp run them for f32 and f64;
// norm_rows_bf16.h overloads each for amp's bf16 (moments too).

/// sum(g) and sum(g * (x - mean)) over `groups` runs of g and x, `stride` apart.
template <typename T>
std::pair<double, double> gradSums(const T* g, const T* x, int64_t groups, int64_t run, int64_t stride, double mean) {
  const double sum_g = sumRuns(g, groups, run, stride, [](const T* p, int64_t i) { return double(p[i]); });
  // x sits at the same offset from x as p from g.
  const double dot = sumRuns(g, groups, run, stride,
                             [&](const T* p, int64_t i) { return double(p[i]) * (double(x[p - g + i]) - mean); });
  return {sum_g, dot};
}

/// y[i] = x[i] * scale + shift over one run.
template <typename T, typename C>
void affineRun(const T* x, T* y, int64_t n, C scale, C shift) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(static_cast<C>(x[i]) * scale + shift);
}

/// gx[i] = (g[i] - grad_mean - (x[i] - mean) * k) * scale over one run:
/// batch norm's input gradient.
template <typename T, typename C>
void normGradRun(const T* g, const T* x, T* gx, int64_t n, C grad_mean, C mean, C k, C scale) {
  for (int64_t i = 0; i < n; ++i) gx[i] = static_cast<T>((C(g[i]) - grad_mean - (C(x[i]) - mean) * k) * scale);
}

}  // namespace kiln::cpu
