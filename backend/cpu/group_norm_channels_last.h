// group_norm and group_norm_backward on channels-last tensors: x is
// [N, S..., C] (group_norm's channels_last=1, set by passes/
// channels_last.cpp on a UNet's NHWC activations) instead of [N, C, S...].
// A group's elements are then short runs of C / G channels spread over every
// row, so each sample runs as batch_norm_rows.h's [rows, C] loops, which
// walk the rows in order and vectorize across the channels: per-channel
// moments (two passes, in double, fixed row blocks: the result depends on the
// shape only, never on the thread count), folded into each group's mean and
// variance exactly (the variance of equal-count parts: the mean of their
// variances plus the variance of their means), then one affine pass.
// The backward uses the same formula as the NCHW kernel:
//   grad_x = rstd * (g * w - mean(g * w) - x_hat * mean(g * w * x_hat)).
// T is float or double (amp's bf16 runs through the f32 kernel).
#pragma once

#include <cstdint>

namespace kiln::cpu {

/// y = group_norm(x) over x[batch, rows, channels] with `groups` groups.
template <typename T>
void groupNormChannelsLast(const T* x, const T* weight, const T* bias, T* y, int64_t batch, int64_t rows,
                           int64_t channels, int64_t groups, double eps);

/// (gx, gw, gb) of group_norm over x[batch, rows, channels] from g.
template <typename T>
void groupNormBackwardChannelsLast(const T* g, const T* x, const T* weight, T* gx, T* gw, T* gb, int64_t batch,
                                   int64_t rows, int64_t channels, int64_t groups, double eps);

}  // namespace kiln::cpu
