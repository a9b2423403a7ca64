// CUDA kernels of softmax, log_softmax and their backward ops {dim}
// (core/ops/nn.cpp, norm_grad.cpp). Formulas are the CPU reference's
// (backend/cpu/kernels_norm.cpp, kernels_norm_grad.cpp), computed in fp32
// for f32/f16/bf16 (fp64 for f64).
//
// Along the innermost dim a warp runs a row when it fits in registers (up
// to 1024 elements: one read), else a 256-thread block with 16-byte vector
// loads keeps an online (max, sum) pair so the row is read twice
// (statistics, then output). Along an outer dim each (outer, inner) column
// is walked by one thread (coalesced across inner).
#include "backend/cuda/norm_common.cuh"

namespace kiln::cuda {
namespace {

using namespace norm;

// ---- softmax / log_softmax -----------------------------------------------------

/// Online (max, sum of exp(x - max)) pair. -inf elements add nothing, a NaN
/// makes the sum NaN; the finish maps an all -inf row to max 0 (the CPU's
/// convention) and a +inf max to a NaN sum (the CPU's exp(inf - inf)).
template <class C>
struct MaxSum {
  C m, s;
};

template <class C>
__device__ __forceinline__ void msStep(MaxSum<C>& a, C x) {
  if (x > a.m) {
    a.s = (a.s == C(0) ? C(0) : a.s * ex(a.m - x)) + C(1);
    a.m = x;
  } else if (x != negInf<C>()) {
    a.s += ex(x - a.m);
  }
}

struct MsCombine {
  template <class C>
  __device__ MaxSum<C> operator()(MaxSum<C> x, MaxSum<C> y) const {
    const C m = y.m > x.m ? y.m : x.m;
    const C sx = x.s == C(0) ? C(0) : x.s * ex(x.m - m);
    const C sy = y.s == C(0) ? C(0) : y.s * ex(y.m - m);
    return {m, sx + sy};
  }
};

template <class C>
__device__ __forceinline__ MaxSum<C> msFinish(MaxSum<C> a) {
  if (a.m == -negInf<C>()) a.s = std::numeric_limits<C>::quiet_NaN();
  if (a.m == negInf<C>()) a.m = C(0);
  return a;
}

/// A warp per row of n <= 32 * kPer, the row in registers: exact max, then
/// the sum of exp, then the output (the CPU's order of operations).
template <class T, bool kLog, int kPer>
__global__ void __launch_bounds__(kThreads)
    softmaxWarpKernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int n) {
  using C = Cmp<T>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* src = x + row * n;
  T* dst = y + row * n;
  C v[kPer];
  const C m = warpRowMax<T, kPer>(src, n, lane, v);
  C s = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    if (q * 32 + lane < n) {
      const C e = ex(v[q] - m);
      if constexpr (!kLog) v[q] = e;
      s += e;
    }
  }
  s = warpAll(s, AddOne{});
  if constexpr (kLog) {
    const C lse = lg(s) + m;
#pragma unroll
    for (int q = 0; q < kPer; ++q)
      if (q * 32 + lane < n) dst[q * 32 + lane] = store<T>(v[q] - lse);
  } else {
    const C inv = C(1) / s;
#pragma unroll
    for (int q = 0; q < kPer; ++q)
      if (q * 32 + lane < n) dst[q * 32 + lane] = store<T>(v[q] * inv);
  }
}

/// A block per row: an online (max, sum) pass, then the output pass.
template <class T, bool kLog>
__global__ void __launch_bounds__(kThreads)
    softmaxBlockKernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n) {
  using C = Cmp<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* src = x + row * n;
    T* dst = y + row * n;
    MaxSum<C> a{negInf<C>(), C(0)};
    walkRow<T, 1, false>({src}, nullptr, n, [&](int64_t, const C(&v)[1]) { msStep(a, v[0]); });
    a = msFinish(blockAll(a, MsCombine{}));
    if constexpr (kLog) {
      const C lse = lg(a.s) + a.m;
      walkRow<T, 1, true>({src}, dst, n, [&](int64_t, const C(&v)[1]) { return v[0] - lse; });
    } else {
      const C m = a.m, inv = C(1) / a.s;
      walkRow<T, 1, true>({src}, dst, n, [&](int64_t, const C(&v)[1]) { return ex(v[0] - m) * inv; });
    }
  }
}

/// Softmax along an outer dim: a thread per (outer, inner) column.
template <class T, bool kLog>
__global__ void __launch_bounds__(kThreads)
    softmaxColKernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t size, int64_t inner) {
  using C = Cmp<T>;
  const int64_t total = outer * inner;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (t / inner) * size * inner + t % inner;
    MaxSum<C> a{negInf<C>(), C(0)};
    for (int64_t k = 0; k < size; ++k) msStep(a, load<C>(x[base + k * inner]));
    a = msFinish(a);
    const C lse = lg(a.s) + a.m, inv = C(1) / a.s;
    for (int64_t k = 0; k < size; ++k) {
      const C v = load<C>(x[base + k * inner]);
      y[base + k * inner] = store<T>(kLog ? v - lse : ex(v - a.m) * inv);
    }
  }
}

template <bool kLog>
void softmaxKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                   CudaContext& ctx) {
  const AxisSplit s = splitAt(in[0].shape(), n.i("dim"));
  if (s.outer * s.size * s.inner == 0) return;
  dispatchFloating(in[0].dtype(), n.op().c_str(), [&](auto t) {
    using T = decltype(t);
    const T* x = in[0].as<T>();
    T* y = out[0].as<T>();
    if (s.inner > 1) {
      softmaxColKernel<T, kLog>
          <<<gridFor(s.outer * s.inner), kThreads, 0, ctx.stream>>>(x, y, s.outer, s.size, s.inner);
      checkLaunch("softmaxColKernel", ctx.node);
    } else if (const int per = warpPer(s.size)) {
      withPer(per, [&](auto k) {
        softmaxWarpKernel<T, kLog, decltype(k)::value>
            <<<rowGrid(s.outer, kWarpsPerBlock), kThreads, 0, ctx.stream>>>(x, y, s.outer, static_cast<int>(s.size));
      });
      checkLaunch("softmaxWarpKernel", ctx.node);
    } else {
      softmaxBlockKernel<T, kLog><<<rowGrid(s.outer, 1), kThreads, 0, ctx.stream>>>(x, y, s.outer, s.size);
      checkLaunch("softmaxBlockKernel", ctx.node);
    }
  });
}

// ---- softmax_backward / log_softmax_backward (g, y) ----------------------------
//   softmax:     y * (g - sum(g * y))
//   log_softmax: g - exp(y) * sum(g)

template <class T, bool kLog>
__device__ __forceinline__ Cmp<T> softmaxGradTerm(Cmp<T> g, Cmp<T> y) {
  return kLog ? g : g * y;
}
template <class T, bool kLog>
__device__ __forceinline__ Cmp<T> softmaxGradOut(Cmp<T> g, Cmp<T> y, Cmp<T> s) {
  return kLog ? g - ex(y) * s : y * (g - s);
}

template <class T, bool kLog, int kPer>
__global__ void __launch_bounds__(kThreads) softmaxBackwardWarpKernel(const T* __restrict__ g, const T* __restrict__ y,
                                                                      T* __restrict__ gx, int64_t rows, int n) {
  using C = Cmp<T>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  C gv[kPer], yv[kPer];
  C s = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    gv[q] = k < n ? load<C>(g[row * n + k]) : C(0);
    yv[q] = k < n ? load<C>(y[row * n + k]) : C(0);
    if (k < n) s += softmaxGradTerm<T, kLog>(gv[q], yv[q]);
  }
  s = warpAll(s, AddOne{});
#pragma unroll
  for (int q = 0; q < kPer; ++q)
    if (q * 32 + lane < n) gx[row * n + q * 32 + lane] = store<T>(softmaxGradOut<T, kLog>(gv[q], yv[q], s));
}

template <class T, bool kLog>
__global__ void __launch_bounds__(kThreads)
    softmaxBackwardBlockKernel(const T* g, const T* y, T* gx, int64_t rows, int64_t n) {
  using C = Cmp<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* gr = g + row * n;
    const T* yr = y + row * n;
    C s = C(0);
    walkRow<T, 2, false>({gr, yr}, nullptr, n,
                         [&](int64_t, const C(&v)[2]) { s += softmaxGradTerm<T, kLog>(v[0], v[1]); });
    s = blockAll(s, AddOne{});
    walkRow<T, 2, true>({gr, yr}, gx + row * n, n,
                        [&](int64_t, const C(&v)[2]) { return softmaxGradOut<T, kLog>(v[0], v[1], s); });
  }
}

template <class T, bool kLog>
__global__ void __launch_bounds__(kThreads)
    softmaxBackwardColKernel(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ gx, int64_t outer,
                             int64_t size, int64_t inner) {
  using C = Cmp<T>;
  const int64_t total = outer * inner;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (t / inner) * size * inner + t % inner;
    C s = C(0);
    for (int64_t k = 0; k < size; ++k)
      s += softmaxGradTerm<T, kLog>(load<C>(g[base + k * inner]), load<C>(y[base + k * inner]));
    for (int64_t k = 0; k < size; ++k) {
      const int64_t e = base + k * inner;
      gx[e] = store<T>(softmaxGradOut<T, kLog>(load<C>(g[e]), load<C>(y[e]), s));
    }
  }
}

template <bool kLog>
void softmaxBackwardKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                           CudaContext& ctx) {
  const AxisSplit s = splitAt(in[1].shape(), n.i("dim"));
  if (s.outer * s.size * s.inner == 0) return;
  dispatchFloating(in[1].dtype(), n.op().c_str(), [&](auto t) {
    using T = decltype(t);
    const T* g = in[0].as<T>();
    const T* y = in[1].as<T>();
    T* gx = out[0].as<T>();
    if (s.inner > 1) {
      softmaxBackwardColKernel<T, kLog>
          <<<gridFor(s.outer * s.inner), kThreads, 0, ctx.stream>>>(g, y, gx, s.outer, s.size, s.inner);
      checkLaunch("softmaxBackwardColKernel", ctx.node);
    } else if (const int per = warpPer(s.size)) {
      withPer(per, [&](auto k) {
        softmaxBackwardWarpKernel<T, kLog, decltype(k)::value>
            <<<rowGrid(s.outer, kWarpsPerBlock), kThreads, 0, ctx.stream>>>(g, y, gx, s.outer,
                                                                            static_cast<int>(s.size));
      });
      checkLaunch("softmaxBackwardWarpKernel", ctx.node);
    } else {
      softmaxBackwardBlockKernel<T, kLog><<<rowGrid(s.outer, 1), kThreads, 0, ctx.stream>>>(g, y, gx, s.outer, s.size);
      checkLaunch("softmaxBackwardBlockKernel", ctx.node);
    }
  });
}

}  // namespace

void registerCudaSoftmaxKernels(CudaKernelRegistry& r) {
  add(r, "softmax", softmaxKernel<false>, nullptr, floatInput0);
  add(r, "log_softmax", softmaxKernel<true>, nullptr, floatInput0);
  add(r, "softmax_backward", softmaxBackwardKernel<false>, nullptr, floatInput1);
  add(r, "log_softmax_backward", softmaxBackwardKernel<true>, nullptr, floatInput1);
}

}  // namespace kiln::cuda
