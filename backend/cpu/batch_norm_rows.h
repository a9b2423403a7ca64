// Batch norm over [rows, channels] tensors (BatchNorm1d's [N, C], and any
// x whose channel is the last dim in memory): the per-channel loops of
// kernels_norm.cpp / kernels_norm_grad.cpp would walk each channel with
// stride C, one element per run. These walk the rows in order and
// vectorize across the channels instead.
//
// Sums are taken over fixed blocks of rows (kRowBlock) into double
// per-channel partials, blocks in parallel, and the partials are added in
// block order: the result depends on the shape only, never on the thread
// count. Two passes for the statistics (mean, then squared deviations), as
// norm_moments.h. X is float, double or BFloat16 (computing in float).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::cpu {

/// Per-channel mean and biased variance of x[rows, channels] (NaN
/// variance and zero mean when rows == 0).
template <class X>
void rowsMoments(const X* x, int64_t rows, int64_t channels, std::vector<double>& mean, std::vector<double>& var);

/// y[r, c] = x[r, c] * scale[c] + shift[c], in X's compute type.
template <class X, class C>
void rowsAffine(const X* x, X* y, int64_t rows, int64_t channels, const C* scale, const C* shift);

/// Per channel: sum_g[c] = sum over r of g[r, c] and dot[c] = sum of
/// g[r, c] * (x[r, c] - mean[c]).
template <class X>
void rowsGradSums(const X* g, const X* x, int64_t rows, int64_t channels, const std::vector<double>& mean,
                  std::vector<double>& sum_g, std::vector<double>& dot);

/// gx[r, c] = (g - grad_mean[c] - (x - mean[c]) * k[c]) * scale[c]:
/// batch norm's input gradient, in X's compute type.
template <class X, class C>
void rowsNormGrad(const X* g, const X* x, X* gx, int64_t rows, int64_t channels, const C* grad_mean, const C* mean,
                  const C* k, const C* scale);

}  // namespace kiln::cpu
