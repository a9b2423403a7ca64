// CUDA kernels of the loss family (core/ops/loss.cpp, loss_grad.cpp):
//   cross_entropy, cross_entropy_backward {reduction, ignore_index, label_smoothing}
//   nll_loss, nll_loss_backward {reduction, ignore_index[, num_classes]}
//   mse_loss {reduction}
// Semantics are the CPU reference's (backend/cpu/kernels_loss.cpp,
// kernels_loss_grad.cpp): class inputs
// are [N, C, inner] (a 1-D input is one sample), targets equal to
// ignore_index contribute nothing and "mean" divides by the targets not
// ignored; label smoothing s gives (1 - s) * nll + s / C * sum_k(-log p_k).
// A target out of range cannot throw without a sync: the kernel records the
// node in ctx.error_flag and treats the element as ignored (a zero loss, a
// zero gradient row).
//
// cross_entropy is fused with its log_softmax: one read of each row gives
// the max, the sum of exp (an online pair) and the sum of logits (for
// smoothing), and the picked logit is one more load; its backward recomputes
// them and writes scale * (softmax - smoothing / C - (1 - s) * onehot) in a
// second pass over the row. Rows of up to 1024 classes run a warp each with
// the row in registers; longer rows (GPT-2's 50257) a 256-thread block with
// 16-byte vector loads; a class dim that is not innermost a thread per
// (sample, position). Reductions to a scalar ("mean", "sum") run in two
// deterministic stages (per-block partials, then one block), never atomics.
// Compute is fp32 for f32/f16/bf16 (fp64 for f64); the CPU sums in double.
#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_index.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_rowwise.cuh"
#include "core/ops/op_helpers.h"

namespace kiln::cuda {
namespace {

// ---- row statistics ------------------------------------------------------------

/// Online (max, sum of exp(x - max)) with the sum of the logits: -inf adds
/// nothing, a NaN makes the sum NaN; the finish maps an all -inf row to max
/// 0 and a +inf max to a NaN sum, as the CPU's exact two passes do.
template <class C>
struct RowStats {
  C m, s, sx;
};

template <class C>
__device__ __forceinline__ void rsStep(RowStats<C>& a, C x) {
  if (x > a.m) {
    a.s = (a.s == C(0) ? C(0) : a.s * ex(a.m - x)) + C(1);
    a.m = x;
  } else if (x != negInf<C>()) {
    a.s += ex(x - a.m);
  }
  a.sx += x;
}

struct RsCombine {
  template <class C>
  __device__ RowStats<C> operator()(RowStats<C> x, RowStats<C> y) const {
    const C m = y.m > x.m ? y.m : x.m;
    const C sx = x.s == C(0) ? C(0) : x.s * ex(x.m - m);
    const C sy = y.s == C(0) ? C(0) : y.s * ex(y.m - m);
    return {m, sx + sy, x.sx + y.sx};
  }
};

template <class C>
__device__ __forceinline__ RowStats<C> rsFinish(RowStats<C> a) {
  if (a.m == -negInf<C>()) a.s = std::numeric_limits<C>::quiet_NaN();
  if (a.m == negInf<C>()) a.m = C(0);
  return a;
}

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

enum Reduction { kNone, kMean, kSum };

Reduction reductionOf(const Node& n) {
  const std::string& r = n.s("reduction");
  if (r == "none") return kNone;
  if (r == "sum") return kSum;
  if (r == "mean") return kMean;
  fail(n.describe() + ": unknown reduction \"" + r + "\"");
}

/// Class-loss geometry: input [batch, classes, inner]; a 1-D input is one sample.
struct ClassGeom {
  int64_t batch = 1, classes = 0, inner = 1;
  __host__ __device__ int64_t count() const { return batch * inner; }
};
ClassGeom classGeom(const Shape& x) {
  if (x.size() == 1) return {1, x[0], 1};
  ClassGeom g{x[0], x[1], 1};
  for (size_t d = 2; d < x.size(); ++d) g.inner *= x[d];
  return g;
}

/// Whether target t counts: not ignore_index and a class index; a target
/// out of range raises the node's data fault (once per caller that asks).
__device__ __forceinline__ bool targetCounts(int64_t t, int64_t ignore, int64_t classes, int* flag, uint64_t node,
                                             bool report) {
  if (t == ignore) return false;
  if (t < 0 || t >= classes) {
    if (report) raiseError(flag, node);
    return false;
  }
  return true;
}

// ---- two-stage scalar reductions ("mean", "sum") ------------------------------

template <class C>
struct LossSum {
  C loss;
  long long cnt;
};

struct AddLoss {
  template <class C>
  __device__ LossSum<C> operator()(LossSum<C> x, LossSum<C> y) const {
    return {x.loss + y.loss, x.cnt + y.cnt};
  }
};

constexpr int64_t kLossChunk = 8192;
constexpr int64_t kMaxLossParts = 1024;

int64_t lossParts(int64_t count) {
  return std::clamp<int64_t>(ceilDiv(count, kLossChunk), 1, kMaxLossParts);
}

/// Stage 1: block b sums f(e) over its contiguous chunk of [0, count).
template <class C, class F>
__global__ void __launch_bounds__(kThreads) lossStageKernel(F f, int64_t count, int64_t chunk, LossSum<C>* partial) {
  const int64_t begin = blockIdx.x * chunk, end = count < begin + chunk ? count : begin + chunk;
  LossSum<C> a{C(0), 0};
  for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) a = AddLoss{}(a, f(e));
  a = blockAll(a, AddLoss{});
  if (threadIdx.x == 0) partial[blockIdx.x] = a;
}

enum FinalMode { kFinalSum, kFinalMeanByCount, kFinalMeanByFixed, kFinalCountOnly };

/// Stage 2: one block combines the parts; writes the loss (y) or the count.
template <class C, class Out>
__global__ void __launch_bounds__(kThreads)
    lossFinalKernel(const LossSum<C>* partial, int64_t parts, int mode, double fixed, Out* y, long long* count_out) {
  LossSum<C> a{C(0), 0};
  for (int64_t k = threadIdx.x; k < parts; k += blockDim.x) a = AddLoss{}(a, partial[k]);
  a = blockAll(a, AddLoss{});
  if (threadIdx.x != 0) return;
  if (mode == kFinalCountOnly) {
    *count_out = a.cnt;
    return;
  }
  C v = a.loss;
  if (mode == kFinalMeanByCount) v = a.loss / static_cast<C>(a.cnt);
  if (mode == kFinalMeanByFixed) v = a.loss / static_cast<C>(fixed);
  *y = store<Out>(v);
}

/// Enqueue both stages of f over [0, count) into *y (or *count_out).
template <class C, class Out, class F>
void reduceLoss(const F& f, int64_t count, FinalMode mode, double fixed, Out* y, long long* count_out, void* partial_ws,
                CudaContext& ctx) {
  const int64_t parts = lossParts(count);
  const int64_t chunk = std::max<int64_t>(ceilDiv(count, parts), 1);
  auto* partial = static_cast<LossSum<C>*>(partial_ws);
  lossStageKernel<C, F><<<static_cast<unsigned>(parts), kThreads, 0, ctx.stream>>>(f, count, chunk, partial);
  checkLaunch("lossStageKernel", ctx.node);
  lossFinalKernel<C, Out><<<1, kThreads, 0, ctx.stream>>>(partial, parts, mode, fixed, y, count_out);
  checkLaunch("lossFinalKernel", ctx.node);
}

size_t lossPartialBytes(int64_t count) {
  return alignUp(static_cast<size_t>(lossParts(count)) * sizeof(LossSum<double>));
}

/// Targets that count (for "mean": M).
struct CountSource {
  Index tgt;
  int64_t ignore, classes;
  __device__ LossSum<float> operator()(int64_t e) const {
    const int64_t t = tgt[e];
    return {0.0f, t != ignore && t >= 0 && t < classes ? 1 : 0};
  }
};

// ---- cross_entropy -------------------------------------------------------------

/// Loss of one row from its statistics and picked logit.
template <class C>
__device__ __forceinline__ C crossEntropyOf(const RowStats<C>& st, C picked, int64_t classes, double smoothing) {
  const C lse = lg(st.s) + st.m;
  C l = lse - picked;
  if (smoothing > 0) {
    const C s = C(smoothing);
    l = (C(1) - s) * l + s / C(classes) * (C(classes) * lse - st.sx);
  }
  return l;
}

/// Where each row's loss goes: y (reduction "none", x's dtype) or buf (compute type).
template <class T>
struct LossOut {
  T* y;
  Cmp<T>* buf;
  __device__ __forceinline__ void put(int64_t e, Cmp<T> l) const {
    if (y)
      y[e] = store<T>(l);
    else
      buf[e] = l;
  }
};

template <class T, int kPer>
__global__ void __launch_bounds__(kThreads)
    crossEntropyWarpKernel(const T* __restrict__ x, Index tgt, LossOut<T> out, int64_t rows, int n, int64_t ignore,
                           double smoothing, int* flag, uint64_t node) {
  using C = Cmp<T>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t t = tgt[row];
  C l = C(0);
  if (targetCounts(t, ignore, n, flag, node, lane == 0)) {
    const T* src = x + row * n;
    C v[kPer];
    C m = negInf<C>(), sx = C(0);
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int k = q * 32 + lane;
      v[q] = k < n ? load<C>(src[k]) : negInf<C>();
      m = v[q] > m ? v[q] : m;
      if (k < n) sx += v[q];
    }
    m = warpAll(m, MaxOne{});
    if (m == negInf<C>()) m = C(0);
    C s = C(0);
#pragma unroll
    for (int q = 0; q < kPer; ++q)
      if (q * 32 + lane < n) s += ex(v[q] - m);
    s = warpAll(s, AddOne{});
    if (smoothing > 0) sx = warpAll(sx, AddOne{});
    l = crossEntropyOf(RowStats<C>{m, s, sx}, load<C>(src[t]), n, smoothing);
  }
  if (lane == 0) out.put(row, l);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    crossEntropyBlockKernel(const T* __restrict__ x, Index tgt, LossOut<T> out, int64_t rows, int64_t n, int64_t ignore,
                            double smoothing, int* flag, uint64_t node) {
  using C = Cmp<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = tgt[row];
    if (!targetCounts(t, ignore, n, flag, node, threadIdx.x == 0)) {
      if (threadIdx.x == 0) out.put(row, C(0));
      continue;
    }
    const T* src = x + row * n;
    RowStats<C> a{negInf<C>(), C(0), C(0)};
    walkRow<T, 1, false>({src}, nullptr, n, [&](int64_t, const C(&v)[1]) { rsStep(a, v[0]); });
    a = rsFinish(blockAll(a, RsCombine{}));
    if (threadIdx.x == 0) out.put(row, crossEntropyOf(a, load<C>(src[t]), n, smoothing));
  }
}

/// Class dim not innermost: a thread per (sample, position).
template <class T>
__global__ void __launch_bounds__(kThreads)
    crossEntropyColKernel(const T* __restrict__ x, Index tgt, LossOut<T> out, ClassGeom geo, int64_t ignore,
                          double smoothing, int* flag, uint64_t node) {
  using C = Cmp<T>;
  const int64_t total = geo.count();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = tgt[e];
    C l = C(0);
    if (targetCounts(t, ignore, geo.classes, flag, node, true)) {
      const T* src = x + (e / geo.inner) * geo.classes * geo.inner + e % geo.inner;
      RowStats<C> a{negInf<C>(), C(0), C(0)};
      for (int64_t k = 0; k < geo.classes; ++k) rsStep(a, load<C>(src[k * geo.inner]));
      l = crossEntropyOf(rsFinish(a), load<C>(src[t * geo.inner]), geo.classes, smoothing);
    }
    out.put(e, l);
  }
}

template <class C>
struct LossBufSource {
  const C* buf;
  Index tgt;
  int64_t ignore, classes;
  __device__ LossSum<C> operator()(int64_t e) const {
    const int64_t t = tgt[e];
    return {buf[e], t != ignore && t >= 0 && t < classes ? 1 : 0};
  }
};

size_t crossEntropyWorkspace(const Node& n) {
  if (n.s("reduction") == "none") return 0;
  const ClassGeom geo = classGeom(n.input(0)->shape());
  return alignUp(static_cast<size_t>(geo.count()) * sizeof(double)) + lossPartialBytes(geo.count());
}

void crossEntropyKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                        CudaContext& ctx) {
  const ClassGeom geo = classGeom(in[0].shape());
  const int64_t ignore = n.i("ignore_index");
  const double smoothing = n.f("label_smoothing");
  const Reduction red = reductionOf(n);
  const Index tgt = indexOf(in[1], n);
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, crossEntropyWorkspace(n)));
  dispatchFloating(in[0].dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using C = Cmp<T>;
    const T* x = in[0].as<T>();
    const int64_t count = geo.count();
    LossOut<T> dst{red == kNone ? out[0].as<T>() : nullptr, red == kNone ? nullptr : reinterpret_cast<C*>(ws)};
    if (count > 0) {
      if (geo.inner > 1) {
        crossEntropyColKernel<T><<<gridFor(count), kThreads, 0, ctx.stream>>>(x, tgt, dst, geo, ignore, smoothing,
                                                                              ctx.error_flag, ctx.node_index);
        checkLaunch("crossEntropyColKernel", ctx.node);
      } else if (const int per = warpPer(geo.classes)) {
        withPer(per, [&](auto k) {
          crossEntropyWarpKernel<T, decltype(k)::value><<<rowGrid(count, kWarpsPerBlock), kThreads, 0, ctx.stream>>>(
              x, tgt, dst, count, static_cast<int>(geo.classes), ignore, smoothing, ctx.error_flag, ctx.node_index);
        });
        checkLaunch("crossEntropyWarpKernel", ctx.node);
      } else {
        crossEntropyBlockKernel<T><<<rowGrid(count, 1), kThreads, 0, ctx.stream>>>(
            x, tgt, dst, count, geo.classes, ignore, smoothing, ctx.error_flag, ctx.node_index);
        checkLaunch("crossEntropyBlockKernel", ctx.node);
      }
    }
    if (red != kNone) {
      void* partial = ws + alignUp(static_cast<size_t>(count) * sizeof(double));
      reduceLoss<C>(LossBufSource<C>{dst.buf, tgt, ignore, geo.classes}, count,
                    red == kSum ? kFinalSum : kFinalMeanByCount, 0.0, out[0].as<T>(), nullptr, partial, ctx);
    }
  });
}

// ---- cross_entropy_backward (g, logits, target) --------------------------------
//   grad[k] = scale * (p_k - s / C - (1 - s) * [k == t]),
//   scale = g[e] ("none"), g ("sum") or g / M ("mean", M counted on device).

template <class T>
struct GradScale {
  const T* g;
  const long long* kept;  // "mean": the targets that count
  int mode;               // Reduction
  __device__ __forceinline__ Cmp<T> at(int64_t e) const {
    using C = Cmp<T>;
    if (mode == kNone) return load<C>(g[e]);
    const C g0 = load<C>(g[0]);
    return mode == kMean ? g0 / static_cast<C>(*kept) : g0;
  }
};

template <class T, int kPer>
__global__ void __launch_bounds__(kThreads)
    crossEntropyBackwardWarpKernel(GradScale<T> gs, const T* __restrict__ x, Index tgt, T* __restrict__ gx,
                                   int64_t rows, int n, int64_t ignore, double smoothing, int* flag, uint64_t node) {
  using C = Cmp<T>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t t = tgt[row];
  T* dst = gx + row * n;
  if (!targetCounts(t, ignore, n, flag, node, lane == 0)) {
    for (int k = lane; k < n; k += 32) dst[k] = store<T>(C(0));
    return;
  }
  const T* src = x + row * n;
  C v[kPer];
  const C m = warpRowMax<T, kPer>(src, n, lane, v);
  C s = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    if (q * 32 + lane < n) {
      v[q] = ex(v[q] - m);
      s += v[q];
    }
  }
  s = warpAll(s, AddOne{});
  const C inv = C(1) / s, sc = gs.at(row), uniform = C(smoothing / static_cast<double>(n)), hit = C(1.0 - smoothing);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    if (k < n) dst[k] = store<T>(sc * (v[q] * inv - uniform - (k == t ? hit : C(0))));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    crossEntropyBackwardBlockKernel(GradScale<T> gs, const T* __restrict__ x, Index tgt, T* __restrict__ gx,
                                    int64_t rows, int64_t n, int64_t ignore, double smoothing, int* flag,
                                    uint64_t node) {
  using C = Cmp<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = tgt[row];
    T* dst = gx + row * n;
    if (!targetCounts(t, ignore, n, flag, node, threadIdx.x == 0)) {
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) dst[k] = store<T>(C(0));
      continue;
    }
    const T* src = x + row * n;
    RowStats<C> a{negInf<C>(), C(0), C(0)};
    walkRow<T, 1, false>({src}, nullptr, n, [&](int64_t, const C(&v)[1]) { rsStep(a, v[0]); });
    a = rsFinish(blockAll(a, RsCombine{}));
    const C m = a.m, inv = C(1) / a.s, sc = gs.at(row), uniform = C(smoothing / static_cast<double>(n)),
            hit = C(1.0 - smoothing);
    walkRow<T, 1, true>({src}, dst, n, [&](int64_t k, const C(&v)[1]) {
      return sc * (ex(v[0] - m) * inv - uniform - (k == t ? hit : C(0)));
    });
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    crossEntropyBackwardColKernel(GradScale<T> gs, const T* __restrict__ x, Index tgt, T* __restrict__ gx,
                                  ClassGeom geo, int64_t ignore, double smoothing, int* flag, uint64_t node) {
  using C = Cmp<T>;
  const int64_t total = geo.count();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = tgt[e];
    const int64_t base = (e / geo.inner) * geo.classes * geo.inner + e % geo.inner;
    if (!targetCounts(t, ignore, geo.classes, flag, node, true)) {
      for (int64_t k = 0; k < geo.classes; ++k) gx[base + k * geo.inner] = store<T>(C(0));
      continue;
    }
    RowStats<C> a{negInf<C>(), C(0), C(0)};
    for (int64_t k = 0; k < geo.classes; ++k) rsStep(a, load<C>(x[base + k * geo.inner]));
    a = rsFinish(a);
    const C inv = C(1) / a.s, sc = gs.at(e), uniform = C(smoothing / static_cast<double>(geo.classes)),
            hit = C(1.0 - smoothing);
    for (int64_t k = 0; k < geo.classes; ++k) {
      const int64_t i = base + k * geo.inner;
      gx[i] = store<T>(sc * (ex(load<C>(x[i]) - a.m) * inv - uniform - (k == t ? hit : C(0))));
    }
  }
}

size_t crossEntropyBackwardWorkspace(const Node& n) {
  if (n.s("reduction") != "mean") return 0;
  const ClassGeom geo = classGeom(n.input(1)->shape());
  return alignUp(sizeof(long long)) + lossPartialBytes(geo.count());
}

bool crossEntropyBackwardSupports(const Node& n) {
  return isFloating(n.input(1)->dtype()) && n.input(0)->dtype() == n.input(1)->dtype() &&
         integralDType(n.input(2)->dtype());
}

void crossEntropyBackwardKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                                CudaContext& ctx) {
  const ClassGeom geo = classGeom(in[1].shape());
  const int64_t ignore = n.i("ignore_index"), count = geo.count();
  const double smoothing = n.f("label_smoothing");
  const Reduction red = reductionOf(n);
  const Index tgt = indexOf(in[2], n);
  if (count == 0 || geo.classes == 0) return;
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, crossEntropyBackwardWorkspace(n)));
  auto* kept = reinterpret_cast<long long*>(ws);
  if (red == kMean)
    reduceLoss<float, float>(CountSource{tgt, ignore, geo.classes}, count, kFinalCountOnly, 0.0, nullptr, kept,
                             ws + alignUp(sizeof(long long)), ctx);
  dispatchFloating(in[1].dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const GradScale<T> gs{in[0].as<T>(), kept, red};
    const T* x = in[1].as<T>();
    T* gx = out[0].as<T>();
    if (geo.inner > 1) {
      crossEntropyBackwardColKernel<T><<<gridFor(count), kThreads, 0, ctx.stream>>>(
          gs, x, tgt, gx, geo, ignore, smoothing, ctx.error_flag, ctx.node_index);
      checkLaunch("crossEntropyBackwardColKernel", ctx.node);
    } else if (const int per = warpPer(geo.classes)) {
      withPer(per, [&](auto k) {
        crossEntropyBackwardWarpKernel<T, decltype(k)::value>
            <<<rowGrid(count, kWarpsPerBlock), kThreads, 0, ctx.stream>>>(gs, x, tgt, gx, count,
                                                                          static_cast<int>(geo.classes), ignore,
                                                                          smoothing, ctx.error_flag, ctx.node_index);
      });
      checkLaunch("crossEntropyBackwardWarpKernel", ctx.node);
    } else {
      crossEntropyBackwardBlockKernel<T><<<rowGrid(count, 1), kThreads, 0, ctx.stream>>>(
          gs, x, tgt, gx, count, geo.classes, ignore, smoothing, ctx.error_flag, ctx.node_index);
      checkLaunch("crossEntropyBackwardBlockKernel", ctx.node);
    }
  });
}

// ---- nll_loss (log-probabilities, target) --------------------------------------

template <class T>
struct NllSource {
  const T* x;
  Index tgt;
  ClassGeom geo;
  int64_t ignore;
  int* flag;
  uint64_t node;
  __device__ LossSum<Cmp<T>> operator()(int64_t e) const {
    using C = Cmp<T>;
    const int64_t t = tgt[e];
    if (!targetCounts(t, ignore, geo.classes, flag, node, true)) return {C(0), 0};
    const int64_t b = e / geo.inner, i = e % geo.inner;
    return {-load<C>(x[(b * geo.classes + t) * geo.inner + i]), 1};
  }
};

template <class T>
__global__ void __launch_bounds__(kThreads) nllNoneKernel(NllSource<T> src, T* __restrict__ y, int64_t count) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[e] = store<T>(src(e).loss);
}

size_t nllLossWorkspace(const Node& n) {
  if (n.s("reduction") == "none") return 0;
  return lossPartialBytes(classGeom(n.input(0)->shape()).count());
}

void nllLossKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                   CudaContext& ctx) {
  const ClassGeom geo = classGeom(in[0].shape());
  const int64_t ignore = n.i("ignore_index"), count = geo.count();
  const Reduction red = reductionOf(n);
  const Index tgt = indexOf(in[1], n);
  void* ws = requireWorkspace(ctx, nllLossWorkspace(n));
  dispatchFloating(in[0].dtype(), "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    using C = Cmp<T>;
    const NllSource<T> src{in[0].as<T>(), tgt, geo, ignore, ctx.error_flag, ctx.node_index};
    if (red == kNone) {
      if (count == 0) return;
      nllNoneKernel<T><<<gridFor(count), kThreads, 0, ctx.stream>>>(src, out[0].as<T>(), count);
      checkLaunch("nllNoneKernel", ctx.node);
    } else {
      reduceLoss<C>(src, count, red == kSum ? kFinalSum : kFinalMeanByCount, 0.0, out[0].as<T>(), nullptr, ws, ctx);
    }
  });
}

// ---- nll_loss_backward (g, target) {num_classes} -------------------------------

template <class T>
__global__ void __launch_bounds__(kThreads) nllBackwardKernel(GradScale<T> gs, Index tgt, T* __restrict__ gx,
                                                              ClassGeom geo, int64_t ignore, int* flag, uint64_t node) {
  using C = Cmp<T>;
  const int64_t total = geo.count() * geo.classes;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % geo.inner, k = (idx / geo.inner) % geo.classes, b = idx / (geo.inner * geo.classes);
    const int64_t e = b * geo.inner + i, t = tgt[e];
    C v = C(0);
    if (targetCounts(t, ignore, geo.classes, flag, node, k == 0) && k == t) v = -gs.at(e);
    gx[idx] = store<T>(v);
  }
}

size_t nllLossBackwardWorkspace(const Node& n) {
  if (n.s("reduction") != "mean") return 0;
  return alignUp(sizeof(long long)) + lossPartialBytes(n.input(1)->type().numel());
}

bool nllLossBackwardSupports(const Node& n) {
  return isFloating(n.input(0)->dtype()) && integralDType(n.input(1)->dtype());
}

void nllLossBackwardKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                           CudaContext& ctx) {
  const ClassGeom geo = classGeom(out[0].shape());
  const int64_t ignore = n.i("ignore_index"), count = geo.count();
  const Reduction red = reductionOf(n);
  const Index tgt = indexOf(in[1], n);
  if (count * geo.classes == 0) return;
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, nllLossBackwardWorkspace(n)));
  auto* kept = reinterpret_cast<long long*>(ws);
  if (red == kMean)
    reduceLoss<float, float>(CountSource{tgt, ignore, geo.classes}, count, kFinalCountOnly, 0.0, nullptr, kept,
                             ws + alignUp(sizeof(long long)), ctx);
  dispatchFloating(in[0].dtype(), "nll_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    nllBackwardKernel<T><<<gridFor(count * geo.classes), kThreads, 0, ctx.stream>>>(
        GradScale<T>{in[0].as<T>(), kept, red}, tgt, out[0].as<T>(), geo, ignore, ctx.error_flag, ctx.node_index);
    checkLaunch("nllBackwardKernel", ctx.node);
  });
}

// ---- mse_loss (a, b) with broadcasting -----------------------------------------

constexpr int kMaxDims = 12;

/// The broadcast output's dims innermost first, with a's and b's strides (0
/// along a broadcast dim).
struct Bcast {
  int n;
  bool same;  ///< a and b have the output's shape: flat indices
  int64_t size[kMaxDims], sa[kMaxDims], sb[kMaxDims];
  __device__ __forceinline__ void offsets(int64_t idx, int64_t& oa, int64_t& ob) const {
    if (same) {
      oa = ob = idx;
      return;
    }
    oa = ob = 0;
    for (int d = 0; d < n; ++d) {
      const int64_t c = idx % size[d];
      idx /= size[d];
      oa += c * sa[d];
      ob += c * sb[d];
    }
  }
};

Bcast makeBcast(const Node& n, const Shape& a, const Shape& b, Shape& out) {
  out = broadcastShapes(n, a, b);
  Bcast bc{};
  bc.same = a == out && b == out;
  if (out.size() > kMaxDims) fail(n.describe() + ": more than " + std::to_string(kMaxDims) + " dims");
  auto strides = [&](const Shape& s, int64_t* st) {
    int64_t acc = 1;
    for (size_t k = 0; k < out.size(); ++k) {
      // Output dim out.size() - 1 - k, innermost first; s aligns on the right.
      const int64_t od = static_cast<int64_t>(out.size()) - 1 - static_cast<int64_t>(k);
      const int64_t sd = od - (static_cast<int64_t>(out.size()) - static_cast<int64_t>(s.size()));
      if (sd < 0) {
        st[k] = 0;
        continue;
      }
      st[k] = s[sd] == 1 ? 0 : acc;
      acc *= s[sd];
    }
  };
  bc.n = static_cast<int>(out.size());
  for (size_t k = 0; k < out.size(); ++k) bc.size[k] = out[out.size() - 1 - k];
  strides(a, bc.sa);
  strides(b, bc.sb);
  return bc;
}

template <class T>
struct MseSource {
  const T* a;
  const T* b;
  Bcast bc;
  __device__ LossSum<Cmp<T>> operator()(int64_t i) const {
    using C = Cmp<T>;
    int64_t oa, ob;
    bc.offsets(i, oa, ob);
    const C d = load<C>(a[oa]) - load<C>(b[ob]);
    return {d * d, 0};
  }
};

template <class T>
__global__ void __launch_bounds__(kThreads) mseNoneKernel(MseSource<T> src, T* __restrict__ y, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = store<T>(src(i).loss);
}

size_t mseLossWorkspace(const Node& n) {
  if (n.s("reduction") == "none") return 0;
  return lossPartialBytes(numelOf(broadcastShapes(n, n.input(0)->shape(), n.input(1)->shape())));
}

bool mseLossSupports(const Node& n) {
  return isFloating(n.input(0)->dtype()) && n.input(0)->dtype() == n.input(1)->dtype();
}

void mseLossKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                   CudaContext& ctx) {
  Shape shape;
  const Bcast bc = makeBcast(n, in[0].shape(), in[1].shape(), shape);
  const int64_t count = numelOf(shape);
  const Reduction red = reductionOf(n);
  void* ws = requireWorkspace(ctx, mseLossWorkspace(n));
  dispatchFloating(in[0].dtype(), "mse_loss", [&](auto tag) {
    using T = decltype(tag);
    using C = Cmp<T>;
    const MseSource<T> src{in[0].as<T>(), in[1].as<T>(), bc};
    if (red == kNone) {
      if (count == 0) return;
      mseNoneKernel<T><<<gridFor(count), kThreads, 0, ctx.stream>>>(src, out[0].as<T>(), count);
      checkLaunch("mseNoneKernel", ctx.node);
    } else {
      reduceLoss<C>(src, count, red == kSum ? kFinalSum : kFinalMeanByFixed, static_cast<double>(count), out[0].as<T>(),
                    nullptr, ws, ctx);
    }
  });
}

// ---- registration --------------------------------------------------------------

bool classLossSupports(const Node& n) {
  // Not cross_entropy {dtype=f32} over bf16/f16 logits (the CPU's fuse folds amp's cast into it).
  return isFloating(n.input(0)->dtype()) && integralDType(n.input(1)->dtype()) &&
         n.output()->dtype() == n.input(0)->dtype();
}

}  // namespace

void registerCudaLossKernels(CudaKernelRegistry& r) {
  r.add(ownCudaKernel("cross_entropy", crossEntropyKernel, crossEntropyWorkspace, classLossSupports));
  r.add(ownCudaKernel("cross_entropy_backward", crossEntropyBackwardKernel, crossEntropyBackwardWorkspace,
                      crossEntropyBackwardSupports));
  r.add(ownCudaKernel("nll_loss", nllLossKernel, nllLossWorkspace, classLossSupports));
  r.add(ownCudaKernel("nll_loss_backward", nllLossBackwardKernel, nllLossBackwardWorkspace, nllLossBackwardSupports));
  r.add(ownCudaKernel("mse_loss", mseLossKernel, mseLossWorkspace, mseLossSupports));
}

}  // namespace kiln::cuda
