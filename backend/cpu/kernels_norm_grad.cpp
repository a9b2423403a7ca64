// CPU kernels of the normalization backward ops (core/ops/norm_grad.cpp),
// "cpu"; f32/f64 natively, f16/bf16 in f32:
//   batch_norm_backward, layer_norm_backward, group_norm_backward
//     -> (grad_x, grad_weight, grad_bias)
//   softmax_backward, log_softmax_backward
// The norm kernels recompute the statistics from x exactly as the forward
// kernels (backend/cpu/kernels_norm.cpp) do: two passes in double, biased
// variance. Per-slice sums (of g and of g * x_hat) accumulate in double;
// the per-element arithmetic runs in T on centred values (x - mean), so a
// large mean does not cancel away f32 precision.
//
// With x_hat = (x - mean) * rstd over the M elements of one slice (a channel
// for training batch norm, a row for layer norm, a (sample, group) for group
// norm) and gh = g * weight, PyTorch's formula is
//   grad_x = rstd * (gh - mean(gh) - x_hat * mean(gh * x_hat))
// grad_weight sums g * x_hat and grad_bias sums g over everything but the
// weight's axis. Eval batch norm uses the running stats as constants:
//   grad_x = g * weight * rsqrt(running_var + eps).
// grad_weight/grad_bias of layer norm sum down columns; each thread owns a
// block of columns and walks the rows in order, so results do not depend on
// the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/batch_norm_rows.h"
#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/float_kernel.h"
#include "backend/cpu/group_norm_channels_last.h"
#include "backend/cpu/norm_moments.h"
#include "backend/cpu/norm_rows_bf16.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

/// Element count of dims 2.. (the spatial extent of an [N, C, ...] tensor).
int64_t innerSize(const Shape& s) {
  return numelOf(Shape(s.begin() + 2, s.end()));
}

// ---- batch_norm_backward(g, x, weight[, running_mean, running_var]) -------------------

/// The per-channel results of batch norm's backward given the sums
/// sum_g = sum(g) and dotp = sum(g * (x - mean)): grad_weight, grad_bias,
/// and the constants of the input gradient
/// gx = (g - grad_mean - (x - mean) * k) * scale. Training: the batch mean
/// and variance depend on x too (the projection of g onto the normalized
/// output is removed); eval: the statistics are constants.
template <typename C>
struct ChannelGrad {
  double grad_weight, grad_bias;
  C scale, grad_mean, k;
};
template <typename C>
ChannelGrad<C> channelGrad(double sum_g, double dotp, double invstd, double w, int64_t count, bool training) {
  const bool batch_stats = training && count > 0;
  const double n = static_cast<double>(count);
  return {count > 0 ? dotp * invstd : 0.0, sum_g, static_cast<C>(invstd * w),
          static_cast<C>(batch_stats ? sum_g / n : 0.0),
          static_cast<C>(batch_stats ? dotp * invstd * invstd / n : 0.0)};
}

/// x with inner size 1 ([rows, channels], BatchNorm1d's layout):
/// batch_norm_rows.h's loops, vectorized across the channels.
template <typename X, typename P>
void batchNormBackwardRowsImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  using C = compute_t<X>;
  const int64_t rows = in[1].shape()[0], channels = in[1].shape()[1];
  const bool training = n.i("training") != 0;
  const double eps = n.f("eps");
  const X* g = in[0].data<X>();
  const X* x = in[1].data<X>();
  const P* w = in[2].data<P>();
  X* gx = allocAs(n, out, 0, in[1].dtype()).template data<X>();
  P* gw = allocAs(n, out, 1, in[2].dtype()).template data<P>();
  P* gb = allocAs(n, out, 2, in[2].dtype()).template data<P>();
  std::vector<double> mean, var;
  if (training) {
    rowsMoments(x, rows, channels, mean, var);
  } else {
    mean.assign(in[3].data<P>(), in[3].data<P>() + channels);
    var.assign(in[4].data<P>(), in[4].data<P>() + channels);
  }
  std::vector<double> sum_g, dot;
  rowsGradSums(g, x, rows, channels, mean, sum_g, dot);
  std::vector<C> cmean(static_cast<size_t>(channels)), scale(cmean), grad_mean(cmean), k(cmean);
  for (int64_t c = 0; c < channels; ++c) {
    const double invstd = 1.0 / std::sqrt(var[c] + eps);
    const ChannelGrad<C> r = channelGrad<C>(sum_g[c], dot[c], invstd, w[c], rows, training);
    gw[c] = static_cast<P>(r.grad_weight);
    gb[c] = static_cast<P>(r.grad_bias);
    cmean[c] = static_cast<C>(mean[c]), scale[c] = r.scale, grad_mean[c] = r.grad_mean, k[c] = r.k;
  }
  rowsNormGrad(g, x, gx, rows, channels, grad_mean.data(), cmean.data(), k.data(), scale.data());
}

/// X: the storage type of g, x and grad_x (float, double, or BFloat16 for
/// amp's bf16 activations, whose per-channel steps are norm_rows_bf16.h's
/// overloads); P: weight's, the statistics' and grad_weight's and
/// grad_bias's (f32 under amp). Arithmetic in compute_t<X>, sums in double.
template <typename X, typename P = X>
void batchNormBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  using C = compute_t<X>;
  const Shape& xs = in[1].shape();
  const int64_t batch = xs[0], channels = xs[1], inner = innerSize(xs);
  if (inner == 1) return batchNormBackwardRowsImpl<X, P>(n, in, out);
  const int64_t count = batch * inner;
  const bool training = n.i("training") != 0;
  const double eps = n.f("eps");
  const X* g = in[0].data<X>();
  const X* x = in[1].data<X>();
  const P* w = in[2].data<P>();
  const P* rmean = training ? nullptr : in[3].data<P>();
  const P* rvar = training ? nullptr : in[4].data<P>();
  X* gx = allocAs(n, out, 0, in[1].dtype()).template data<X>();
  P* gw = allocAs(n, out, 1, in[2].dtype()).template data<P>();
  P* gb = allocAs(n, out, 2, in[2].dtype()).template data<P>();
#pragma omp parallel for if (channels * count > kOmpMinWork)
  for (int64_t c = 0; c < channels; ++c) {
    double mean, invstd;
    if (training) {
      const auto [m, var] = moments(x + c * inner, batch, inner, channels * inner);
      mean = m;
      invstd = 1.0 / std::sqrt(var + eps);
    } else {
      mean = rmean[c];
      invstd = 1.0 / std::sqrt(static_cast<double>(rvar[c]) + eps);
    }
    const auto [sum_g, dotp] = gradSums(g + c * inner, x + c * inner, batch, inner, channels * inner, mean);
    const auto [grad_weight, grad_bias, scale, grad_mean, k] =
        channelGrad<C>(sum_g, dotp, invstd, w[c], count, training);
    gw[c] = static_cast<P>(grad_weight);
    gb[c] = static_cast<P>(grad_bias);
    const C tmean = static_cast<C>(mean);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t off = (b * channels + c) * inner;
      normGradRun(g + off, x + off, gx + off, inner, grad_mean, tmean, k, scale);
    }
  }
}

// ---- layer_norm_backward(g, x, weight) -----------------------------------------------

/// One row's input gradient, given the row's mean, rstd and means m1, m2; a
/// free function so it gets vector clones (inside the OpenMP loop it ran at
/// the SSE2 baseline). Each element's math is unchanged.
template <typename T>
KILN_SIMD_CLONES_512 void layerNormGradRow(const T* gr, const T* xr, const T* w, T* dst, int64_t row, T tmean, T trstd,
                                           T m1, T m2) {
  for (int64_t i = 0; i < row; ++i) {
    const T xhat = (xr[i] - tmean) * trstd;
    dst[i] = trstd * (gr[i] * w[i] - m1 - xhat * m2);
  }
}

template <typename T>
void layerNormBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t row = numelOf(n.is("normalized_shape"));
  const int64_t rows = row ? in[1].numel() / row : 0;
  const double eps = n.f("eps");
  const DType dt = in[0].dtype();
  const T* g = in[0].data<T>();
  const T* x = in[1].data<T>();
  const T* w = in[2].data<T>();
  T* gx = allocAs(n, out, 0, dt).template data<T>();
  T* gw = allocAs(n, out, 1, dt).template data<T>();
  T* gb = allocAs(n, out, 2, dt).template data<T>();
  std::vector<T> means(static_cast<size_t>(rows)), rstds(static_cast<size_t>(rows));
#pragma omp parallel for if (rows * row > kOmpMinWork)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * row;
    const T* gr = g + r * row;
    const auto [mean, var] = moments(xr, 1, row, row);
    const double rstd = 1.0 / std::sqrt(var + eps);
    const T tmean = static_cast<T>(mean), trstd = static_cast<T>(rstd);
    means[static_cast<size_t>(r)] = tmean;
    rstds[static_cast<size_t>(r)] = trstd;
    double s1 = 0, s2 = 0;  // sum(gh), sum(gh * x_hat)
    for (int64_t i = 0; i < row; ++i) {
      const double gh = static_cast<double>(gr[i]) * w[i];
      s1 += gh;
      s2 += gh * ((xr[i] - mean) * rstd);
    }
    const T m1 = static_cast<T>(s1 / static_cast<double>(row)), m2 = static_cast<T>(s2 / static_cast<double>(row));
    layerNormGradRow(gr, xr, w, gx + r * row, row, tmean, trstd, m1, m2);
  }
  // Column sums, a block of columns per thread, rows in order.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (row + kBlock - 1) / kBlock;
#pragma omp parallel for if (rows * row > kOmpMinWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kBlock, i1 = std::min(row, i0 + kBlock);
    double acc_w[kBlock] = {}, acc_b[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * row;
      const T* gr = g + r * row;
      const T mean = means[static_cast<size_t>(r)], rstd = rstds[static_cast<size_t>(r)];
      for (int64_t i = i0; i < i1; ++i) {
        acc_w[i - i0] += static_cast<double>(gr[i]) * ((xr[i] - mean) * rstd);
        acc_b[i - i0] += gr[i];
      }
    }
    for (int64_t i = i0; i < i1; ++i) {
      gw[i] = static_cast<T>(acc_w[i - i0]);
      gb[i] = static_cast<T>(acc_b[i - i0]);
    }
  }
}

// ---- group_norm_backward(g, x, weight) -----------------------------------------------

template <typename T>
void groupNormBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Shape& xs = in[1].shape();
  const int64_t batch = xs[0], channels = xs[1], groups = n.i("num_groups"), inner = innerSize(xs);
  const int64_t per_group = channels / groups, size = per_group * inner;
  const double eps = n.f("eps");
  const DType dt = in[0].dtype();
  const T* g = in[0].data<T>();
  const T* x = in[1].data<T>();
  const T* w = in[2].data<T>();
  T* gx = allocAs(n, out, 0, dt).template data<T>();
  T* gw = allocAs(n, out, 1, dt).template data<T>();
  T* gb = allocAs(n, out, 2, dt).template data<T>();
  if (channelsLast(n)) {  // x is [N, S..., C]
    const int64_t c = xs.back(), rows = batch > 0 && c > 0 ? in[1].numel() / (batch * c) : 0;
    groupNormBackwardChannelsLast(g, x, w, gx, gw, gb, batch, rows, c, groups, eps);
    return;
  }
  std::vector<T> means(static_cast<size_t>(batch * groups)), rstds(static_cast<size_t>(batch * groups));
#pragma omp parallel for if (batch * channels * inner > kOmpMinWork)
  for (int64_t bg = 0; bg < batch * groups; ++bg) {
    // A group's channels are contiguous: one run of per_group * inner.
    const int64_t off = bg * size, c0 = (bg % groups) * per_group;
    const auto [mean, var] = moments(x + off, 1, size, 0);
    const double rstd = 1.0 / std::sqrt(var + eps);
    const T tmean = static_cast<T>(mean), trstd = static_cast<T>(rstd);
    means[static_cast<size_t>(bg)] = tmean;
    rstds[static_cast<size_t>(bg)] = trstd;
    double s1 = 0, s2 = 0;  // sum(gh), sum(gh * x_hat)
    for (int64_t c = 0; c < per_group; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t e = off + c * inner + i;
        const double gh = static_cast<double>(g[e]) * w[c0 + c];
        s1 += gh;
        s2 += gh * ((x[e] - mean) * rstd);
      }
    const T m1 = static_cast<T>(size ? s1 / static_cast<double>(size) : 0.0);
    const T m2 = static_cast<T>(size ? s2 / static_cast<double>(size) : 0.0);
    for (int64_t c = 0; c < per_group; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t e = off + c * inner + i;
        const T xhat = (x[e] - tmean) * trstd;
        gx[e] = trstd * (g[e] * w[c0 + c] - m1 - xhat * m2);
      }
  }
#pragma omp parallel for if (batch * channels * inner > kOmpMinWork)
  for (int64_t c = 0; c < channels; ++c) {
    double acc_w = 0, acc_b = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const size_t bg = static_cast<size_t>(b * groups + c / per_group);
      const T mean = means[bg], rstd = rstds[bg];
      const int64_t off = (b * channels + c) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        acc_w += static_cast<double>(g[off + i]) * ((x[off + i] - mean) * rstd);
        acc_b += g[off + i];
      }
    }
    gw[c] = static_cast<T>(acc_w);
    gb[c] = static_cast<T>(acc_b);
  }
}

// ---- softmax_backward / log_softmax_backward(g, y) {dim} ---------------------------

/// Along `dim`, viewed as [outer, size, inner] like the forward kernel.
template <typename T, bool kLog>
void softmaxBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Shape& s = in[1].shape();
  const int64_t rank = static_cast<int64_t>(s.size());
  const int64_t dim = rank == 0 ? 0 : normalizeAxis(n.i("dim"), rank);
  const int64_t size = rank == 0 ? 1 : s[static_cast<size_t>(dim)];
  const int64_t inner = rank == 0 ? 1 : numelOf(Shape(s.begin() + dim + 1, s.end()));
  const int64_t outer = size * inner != 0 ? in[1].numel() / (size * inner) : 0;
  const T* g = in[0].data<T>();
  const T* y = in[1].data<T>();
  T* gx = allocAs(n, out, 0, in[0].dtype()).template data<T>();
#pragma omp parallel for collapse(2) if (outer * inner * size > kOmpMinWork)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * size * inner + i;
      double sum = 0;  // softmax: sum(g * y); log_softmax: sum(g)
      for (int64_t k = 0; k < size; ++k) {
        const int64_t e = base + k * inner;
        sum += kLog ? static_cast<double>(g[e]) : static_cast<double>(g[e]) * y[e];
      }
      const T ts = static_cast<T>(sum);
      for (int64_t k = 0; k < size; ++k) {
        const int64_t e = base + k * inner;
        if constexpr (kLog)
          gx[e] = g[e] - std::exp(y[e]) * ts;
        else
          gx[e] = y[e] * (g[e] - ts);
      }
    }
}

void batchNormBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { batchNormBackwardImpl<decltype(t)>(n, in, out); });
}
/// amp's bf16 batch norm: g, x and grad_x bf16; weight, statistics and the
/// parameter gradients f32.
bool batchNormBackwardBf16(const Node& n) {
  if (n.input(0)->dtype() != DType::BF16 || n.input(1)->dtype() != DType::BF16) return false;
  for (size_t i = 2; i < n.numInputs(); ++i)
    if (n.input(i)->dtype() != DType::F32) return false;
  return n.output(0)->dtype() == DType::BF16 && n.output(1)->dtype() == DType::F32;
}
/// batchNormBackwardImpl with norm_rows_bf16.h's float-vector loops.
void batchNormBackwardBf16Kernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  batchNormBackwardImpl<BFloat16, float>(n, in, out);
}

void layerNormBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { layerNormBackwardImpl<decltype(t)>(n, in, out); });
}
void groupNormBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { groupNormBackwardImpl<decltype(t)>(n, in, out); });
}
void softmaxBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { softmaxBackwardImpl<decltype(t), false>(n, in, out); });
}
void logSoftmaxBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { softmaxBackwardImpl<decltype(t), true>(n, in, out); });
}

bool floatInputs(const Node& n) {
  for (Value* v : n.inputs())
    if (!isFloating(v->dtype())) return false;
  return true;
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void registerCpuNormGradKernels(KernelRegistry& r) {
  using namespace cpu;
  // Each channel's sums are taken before its grad_x is written, element by
  // element from g and x at the same index: grad_x may overwrite g or x.
  KernelDef bn{
      "batch_norm_backward", "cpu", "cpu.batch_norm_backward", 0, floatInputs, viaComputeType<batchNormBackwardKernel>};
  bn.writes_over_input = true;
  KernelDef bn_bf16 = bn;
  r.add(std::move(bn));
  bn_bf16.name = "cpu.batch_norm_backward_bf16";
  bn_bf16.priority = 10;
  bn_bf16.supports = batchNormBackwardBf16;
  bn_bf16.fn = batchNormBackwardBf16Kernel;
  r.add(std::move(bn_bf16));
  r.add({"layer_norm_backward", "cpu", "cpu.layer_norm_backward", 0, floatInputs,
         viaComputeType<layerNormBackwardKernel>});
  r.add({"group_norm_backward", "cpu", "cpu.group_norm_backward", 0, floatInputs,
         viaComputeType<groupNormBackwardKernel>});
  r.add({"softmax_backward", "cpu", "cpu.softmax_backward", 0, floatInputs, viaComputeType<softmaxBackwardKernel>});
  r.add({"log_softmax_backward", "cpu", "cpu.log_softmax_backward", 0, floatInputs,
         viaComputeType<logSoftmaxBackwardKernel>});
}

}  // namespace kiln
