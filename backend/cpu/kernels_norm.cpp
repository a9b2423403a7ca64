// CPU kernels for normalization: batch_norm (eval and training), layer_norm
// and group_norm ("cpu"; f32/f64 natively, f16/bf16 in f32; group_norm on
// channels-last tensors in group_norm_channels_last.cpp; batch_norm also
// reads and writes amp's bf16 activations directly, with f32 parameters). Statistics
// are accumulated in double with two passes (mean, then squared deviations)
// so large planes don't lose precision. Training batch_norm matches
// PyTorch: normalize with the biased batch variance, update running_var
// with the unbiased one: new = (1 - momentum) * old + momentum * batch.
#include <cmath>
#include <utility>
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

/// The running statistics' update, as PyTorch's: the unbiased variance
/// for the running estimate (count - 1 = 0 gives inf/nan, as in PyTorch).
template <typename P>
void updateRunning(int64_t c, double mean, double var, int64_t count, double momentum, const P* rmean, const P* rvar,
                   P* new_mean, P* new_var) {
  const double unbiased = var * static_cast<double>(count) / static_cast<double>(count - 1);
  new_mean[c] = static_cast<P>((1 - momentum) * rmean[c] + momentum * mean);
  new_var[c] = static_cast<P>((1 - momentum) * rvar[c] + momentum * unbiased);
}

/// y = x * scale + shift: the normalization with the per-channel affine folded in.
template <typename C>
std::pair<C, C> foldedAffine(double mean, double var, double eps, double weight, double bias) {
  const double inv_std = 1.0 / std::sqrt(var + eps);
  return {static_cast<C>(inv_std * weight), static_cast<C>(bias - mean * inv_std * weight)};
}

/// x with inner size 1 ([rows, channels], BatchNorm1d's layout):
/// batch_norm_rows.h's loops, vectorized across the channels.
template <typename X, typename P>
void batchNormRowsImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  using C = compute_t<X>;
  const int64_t rows = in[0].shape()[0], channels = in[0].shape()[1];
  const bool training = n.i("training") != 0;
  const double momentum = n.f("momentum"), eps = n.f("eps");
  const X* x = in[0].data<X>();
  X* y = allocAs(n, out, 0, in[0].dtype()).template data<X>();
  const P* weight = in[1].data<P>();
  const P* bias = in[2].data<P>();
  const P* rmean = in[3].data<P>();
  const P* rvar = in[4].data<P>();
  std::vector<double> mean(rmean, rmean + channels), var(rvar, rvar + channels);
  if (training) {
    P* new_mean = allocAs(n, out, 1, in[3].dtype()).template data<P>();
    P* new_var = allocAs(n, out, 2, in[4].dtype()).template data<P>();
    rowsMoments(x, rows, channels, mean, var);
    for (int64_t c = 0; c < channels; ++c)
      updateRunning(c, mean[c], var[c], rows, momentum, rmean, rvar, new_mean, new_var);
  }
  std::vector<C> scale(static_cast<size_t>(channels)), shift(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c)
    std::tie(scale[c], shift[c]) = foldedAffine<C>(mean[c], var[c], eps, weight[c], bias[c]);
  rowsAffine(x, y, rows, channels, scale.data(), shift.data());
}

/// X: the storage type of x and y (float, double, or BFloat16 for amp's
/// bf16 activations, whose per-channel steps are norm_rows_bf16.h's
/// overloads); P: the parameters' and running statistics' (f32 master
/// copies under amp). Arithmetic is in compute_t<X>, statistics in double.
template <typename X, typename P = X>
void batchNormImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  using C = compute_t<X>;
  const Shape& xs = in[0].shape();
  const int64_t batch = xs[0], channels = xs[1];
  const int64_t inner = numelOf(Shape(xs.begin() + 2, xs.end()));
  if (inner == 1) return batchNormRowsImpl<X, P>(n, in, out);
  const bool training = n.i("training") != 0;
  const double momentum = n.f("momentum"), eps = n.f("eps");
  Tensor& yt = allocAs(n, out, 0, in[0].dtype());
  const X* x = in[0].data<X>();
  const P* weight = in[1].data<P>();
  const P* bias = in[2].data<P>();
  const P* rmean = in[3].data<P>();
  const P* rvar = in[4].data<P>();
  X* y = yt.data<X>();
  P *new_mean = nullptr, *new_var = nullptr;
  if (training) {
    new_mean = allocAs(n, out, 1, in[3].dtype()).template data<P>();
    new_var = allocAs(n, out, 2, in[4].dtype()).template data<P>();
  }
  const int64_t count = batch * inner;
#pragma omp parallel for if (channels * count > kOmpMinWork)
  for (int64_t c = 0; c < channels; ++c) {
    double mean, var;
    if (training) {
      std::tie(mean, var) = moments(x + c * inner, batch, inner, channels * inner);
      updateRunning(c, mean, var, count, momentum, rmean, rvar, new_mean, new_var);
    } else {
      mean = rmean[c];
      var = rvar[c];
    }
    const auto [scale, shift] = foldedAffine<C>(mean, var, eps, weight[c], bias[c]);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t off = (b * channels + c) * inner;
      affineRun(x + off, y + off, inner, scale, shift);
    }
  }
}

/// One layer-norm row: (x - mean) * inv_std * weight + bias, in double as
/// before; a free function so it gets vector clones (inside the OpenMP
/// loop it ran at the SSE2 baseline). Each element's math is unchanged.
template <typename T>
KILN_SIMD_CLONES_512 void layerNormRow(const T* src, T* dst, int64_t row, double mean, double inv_std, const T* weight,
                                       const T* bias) {
  for (int64_t i = 0; i < row; ++i) dst[i] = static_cast<T>((src[i] - mean) * inv_std * weight[i] + bias[i]);
}

template <typename T>
void layerNormImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t row = numelOf(n.is("normalized_shape"));
  const int64_t rows = row ? in[0].numel() / row : 0;
  const double eps = n.f("eps");
  Tensor& yt = allocAs(n, out, 0, in[0].dtype());
  const T* x = in[0].data<T>();
  const T* weight = in[1].data<T>();
  const T* bias = in[2].data<T>();
  T* y = yt.data<T>();
#pragma omp parallel for if (rows * row > kOmpMinWork)
  for (int64_t r = 0; r < rows; ++r) {
    const T* src = x + r * row;
    auto [mean, var] = moments(src, 1, row, row);
    layerNormRow(src, y + r * row, row, mean, 1.0 / std::sqrt(var + eps), weight, bias);
  }
}

template <typename T>
void groupNormImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Shape& xs = in[0].shape();
  const int64_t batch = xs[0], channels = xs[1], groups = n.i("num_groups");
  const int64_t inner = numelOf(Shape(xs.begin() + 2, xs.end()));
  const int64_t per_group = channels / groups;
  const double eps = n.f("eps");
  Tensor& yt = allocAs(n, out, 0, in[0].dtype());
  const T* x = in[0].data<T>();
  const T* weight = in[1].data<T>();
  const T* bias = in[2].data<T>();
  T* y = yt.data<T>();
  if (channelsLast(n)) {  // x is [N, S..., C]
    const int64_t c = xs.back(), rows = batch > 0 && c > 0 ? in[0].numel() / (batch * c) : 0;
    groupNormChannelsLast(x, weight, bias, y, batch, rows, c, groups, eps);
    return;
  }
#pragma omp parallel for if (in[0].numel() > kOmpMinWork)
  for (int64_t bg = 0; bg < batch * groups; ++bg) {
    // A group's channels are contiguous: one run of per_group * inner.
    const int64_t off = bg * per_group * inner;
    auto [mean, var] = moments(x + off, 1, per_group * inner, 0);
    const double inv_std = 1.0 / std::sqrt(var + eps);
    const int64_t c0 = (bg % groups) * per_group;
    // (x - mean) * scale + bias rather than x * scale + shift: a constant
    // group (zero variance, scale 1 / sqrt(eps)) gives exactly the bias, as
    // PyTorch's kernel does, where the folded shift cancelled to ~3e-5 off.
    const T m = static_cast<T>(mean);
    for (int64_t c = 0; c < per_group; ++c) {
      const T scale = static_cast<T>(inv_std * weight[c0 + c]);
      const T b = static_cast<T>(bias[c0 + c]);
      const T* src = x + off + c * inner;
      T* dst = y + off + c * inner;
      for (int64_t i = 0; i < inner; ++i) dst[i] = (src[i] - m) * scale + b;
    }
  }
}

void batchNormKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { batchNormImpl<decltype(t)>(n, in, out); });
}
void layerNormKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { layerNormImpl<decltype(t)>(n, in, out); });
}
void groupNormKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { groupNormImpl<decltype(t)>(n, in, out); });
}

bool floatInputs(const Node& n) {
  for (Value* v : n.inputs())
    if (!isFloating(v->dtype())) return false;
  return true;
}

/// amp's bf16 batch norm: x and y bf16, parameters and statistics f32.
bool bf16WithF32Params(const Node& n) {
  if (n.input(0)->dtype() != DType::BF16 || n.output(0)->dtype() != DType::BF16) return false;
  for (size_t i = 1; i < n.numInputs(); ++i)
    if (n.input(i)->dtype() != DType::F32) return false;
  return true;
}

/// amp's bf16 batch norm: batchNormImpl with norm_rows_bf16.h's
/// float-vector loops.
void batchNormBf16Kernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  batchNormImpl<BFloat16, float>(n, in, out);
}

}  // namespace

void registerCpuNormKernels(KernelRegistry& r) {
  r.add({"batch_norm", "cpu", "cpu.batch_norm", 0, floatInputs, viaComputeType<batchNormKernel>});
  r.add({"batch_norm", "cpu", "cpu.batch_norm_bf16", 10, bf16WithF32Params, batchNormBf16Kernel});
  r.add({"layer_norm", "cpu", "cpu.layer_norm", 0, floatInputs, viaComputeType<layerNormKernel>});
  r.add({"group_norm", "cpu", "cpu.group_norm", 0, floatInputs, viaComputeType<groupNormKernel>});
}

}  // namespace kiln::cpu
