// CUDA kernels of 2-D pooling and its gradients ("cuda", priority 0; f32,
// f64, and f16/bf16 computed in f32): max_pool2d, avg_pool2d,
// adaptive_avg_pool2d, adaptive_max_pool2d and their _backward ops. Input is
// [N, C, H, W] or [C, H, W]; every leading plane is pooled independently.
// The window arithmetic is backend/cpu/kernels_pool.cpp's and
// kernels_pool_grad.cpp's, element for element, so results match the CPU's
// exactly (same operations, same order, same rounding):
//  - output sizes come from shape inference (ceil_mode is in them);
//  - max pooling skips padding and propagates NaN; an empty window is -inf;
//  - average pooling sums in double and divides by divisor_override, the
//    window clipped to the padded border (count_include_pad) or the window
//    clipped to the input;
//  - backward of max pools: the argmax of every window is recomputed from x
//    with the CPU's scan (first maximum in row-major window order, the last
//    NaN wins, padding never does, a window of only -inf routes to its first
//    in-input element) into the workspace, then each input element gathers
//    the gradients of the windows whose argmax it is;
//  - backward of average pools: each input element gathers g / divisor of
//    every window covering it (adaptive: g / kh / kw, in that order).
// Gathering adds the contributions in the CPU's order (output rows, then
// columns), so sums match its scatter bit for bit, deterministically.
//
// Not covered (predicates reject): non-floating inputs, and for the max
// backward ops an x whose dtype differs from g's or planes of 2^31 or more
// elements (argmax indices are int32).
//
// Also here: the channel-bias kernel kernels_conv.cpp falls back to.
#include <cuda_runtime.h>

#include <climits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

/// Planes of [h, w] pooled to [oh, ow], and the window (1x1 stride 1 for the adaptive pools).
struct PoolGeom {
  int64_t planes, h, w, oh, ow;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

/// `x` is the unpooled shape, `y` the pooled one.
PoolGeom poolGeom(const Node& n, const Shape& x, const Shape& y, bool windowed) {
  const size_t r = x.size();
  PoolGeom g{numelOf(Shape(x.begin(), x.end() - 2)), x[r - 2], x[r - 1], y[r - 2], y[r - 1]};
  if (!windowed) return g;
  auto k = pair(n, "kernel_size");
  auto s = n.is("stride").empty() ? k : pair(n, "stride");
  auto p = pair(n, "padding");
  g.kh = k[0], g.kw = k[1], g.sh = s[0], g.sw = s[1], g.ph = p[0], g.pw = p[1];
  if (n.def().findAttr("dilation")) {
    auto d = pair(n, "dilation");
    g.dh = d[0], g.dw = d[1];
  }
  return g;
}

// ---- device helpers --------------------------------------------------------------------
// Values compute in Cmp<T> (double stays double), through cuda_dtype.cuh's
// load and store (round to nearest even).

__device__ __forceinline__ int64_t floorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

__device__ __forceinline__ int64_t adaptiveStart(int64_t i, int64_t in, int64_t out) {
  return (i * in) / out;
}
__device__ __forceinline__ int64_t adaptiveEnd(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

/// Average pooling's window of output (oy, ox): [y0, y1) x [x0, x1) clipped
/// to the input (what it sums), and its divisor: divisor_override, else the
/// window clipped to the padded input (count_include_pad) or to the input.
struct AvgWindow {
  int64_t y0, y1, x0, x1, div;
};

__device__ __forceinline__ AvgWindow avgWindow(const PoolGeom& g, int64_t oy, int64_t ox, bool include_pad,
                                               int64_t divisor_override) {
  int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
  int64_t y1 = min(y0 + g.kh, g.h + g.ph), x1 = min(x0 + g.kw, g.w + g.pw);
  const int64_t padded_size = (y1 - y0) * (x1 - x0);
  y0 = max(y0, int64_t{0}), x0 = max(x0, int64_t{0});
  y1 = min(y1, g.h), x1 = min(x1, g.w);
  const int64_t div = divisor_override ? divisor_override : include_pad ? padded_size : (y1 - y0) * (x1 - x0);
  return {y0, y1, x0, x1, div};
}

#define KILN_GRID_STRIDE(i, total)                                                           \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (total); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- forward ----------------------------------------------------------------------------

template <typename T>
__global__ void maxPoolKernel(const T* __restrict__ x, T* __restrict__ y, PoolGeom g, int64_t total) {
  using C = Cmp<T>;
  KILN_GRID_STRIDE(idx, total) {
    const int64_t ox = idx % g.ow, oy = (idx / g.ow) % g.oh, p = idx / (g.ow * g.oh);
    const T* src = x + p * g.h * g.w;
    const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
    C best = -static_cast<C>(INFINITY);
    bool nan = false;
    for (int64_t i = 0; i < g.kh && !nan; ++i) {
      const int64_t iy = y0 + i * g.dh;
      if (iy < 0 || iy >= g.h) continue;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t ix = x0 + j * g.dw;
        if (ix < 0 || ix >= g.w) continue;
        const C v = load<C>(src[iy * g.w + ix]);
        if (v > best || isnan(v)) best = v;
        if (isnan(v)) {  // NaN wins; nothing can replace it
          nan = true;
          break;
        }
      }
    }
    y[idx] = store<T>(best);
  }
}

template <typename T>
__global__ void avgPoolKernel(const T* __restrict__ x, T* __restrict__ y, PoolGeom g, bool include_pad,
                              int64_t divisor_override, int64_t total) {
  using C = Cmp<T>;
  KILN_GRID_STRIDE(idx, total) {
    const int64_t ox = idx % g.ow, oy = (idx / g.ow) % g.oh, p = idx / (g.ow * g.oh);
    const T* src = x + p * g.h * g.w;
    const AvgWindow w = avgWindow(g, oy, ox, include_pad, divisor_override);
    if (w.y0 >= w.y1 || w.x0 >= w.x1) {
      y[idx] = store<T>(C(0));
      continue;
    }
    double sum = 0;
    for (int64_t iy = w.y0; iy < w.y1; ++iy)
      for (int64_t ix = w.x0; ix < w.x1; ++ix) sum += static_cast<double>(load<C>(src[iy * g.w + ix]));
    y[idx] = store<T>(static_cast<C>(sum / static_cast<double>(w.div)));
  }
}

template <typename T, bool kMax>
__global__ void adaptivePoolKernel(const T* __restrict__ x, T* __restrict__ y, PoolGeom g, int64_t total) {
  using C = Cmp<T>;
  KILN_GRID_STRIDE(idx, total) {
    const int64_t ox = idx % g.ow, oy = (idx / g.ow) % g.oh, p = idx / (g.ow * g.oh);
    const T* src = x + p * g.h * g.w;
    const int64_t y0 = adaptiveStart(oy, g.h, g.oh), y1 = adaptiveEnd(oy, g.h, g.oh);
    const int64_t x0 = adaptiveStart(ox, g.w, g.ow), x1 = adaptiveEnd(ox, g.w, g.ow);
    if constexpr (kMax) {
      C best = -static_cast<C>(INFINITY);
      for (int64_t iy = y0; iy < y1; ++iy)
        for (int64_t ix = x0; ix < x1; ++ix) {
          const C v = load<C>(src[iy * g.w + ix]);
          if (v > best || isnan(v)) best = v;
        }
      y[idx] = store<T>(best);
    } else {
      double sum = 0;
      for (int64_t iy = y0; iy < y1; ++iy)
        for (int64_t ix = x0; ix < x1; ++ix) sum += static_cast<double>(load<C>(src[iy * g.w + ix]));
      y[idx] = store<T>(static_cast<C>(sum / static_cast<double>((y1 - y0) * (x1 - x0))));
    }
  }
}

// ---- backward -----------------------------------------------------------------------------

/// Each output's argmax (index within its plane) under the CPU's rule, -1
/// for a window without input elements.
template <typename T, bool kAdaptive>
__global__ void argmaxKernel(const T* __restrict__ x, int32_t* __restrict__ arg, PoolGeom g, int64_t total) {
  using C = Cmp<T>;
  KILN_GRID_STRIDE(idx, total) {
    const int64_t ox = idx % g.ow, oy = (idx / g.ow) % g.oh, p = idx / (g.ow * g.oh);
    const T* src = x + p * g.h * g.w;
    int64_t y0, y1, x0, x1, dy, dx;
    if constexpr (kAdaptive) {
      y0 = adaptiveStart(oy, g.h, g.oh), y1 = adaptiveEnd(oy, g.h, g.oh), dy = 1;
      x0 = adaptiveStart(ox, g.w, g.ow), x1 = adaptiveEnd(ox, g.w, g.ow), dx = 1;
    } else {
      // First in-input row/column of the dilated window, and the clipped end.
      y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw, dy = g.dh, dx = g.dw;
      y1 = min(y0 + (g.kh - 1) * g.dh + 1, g.h), x1 = min(x0 + (g.kw - 1) * g.dw + 1, g.w);
      if (y0 < 0) y0 += (-y0 + g.dh - 1) / g.dh * g.dh;
      if (x0 < 0) x0 += (-x0 + g.dw - 1) / g.dw * g.dw;
    }
    int64_t best_i = -1;
    if (y0 < y1 && x0 < x1) {
      best_i = y0 * g.w + x0;
      C best = -static_cast<C>(INFINITY);
      for (int64_t iy = y0; iy < y1; iy += dy)
        for (int64_t ix = x0; ix < x1; ix += dx) {
          const C v = load<C>(src[iy * g.w + ix]);
          if (v > best || isnan(v)) best = v, best_i = iy * g.w + ix;
        }
    }
    arg[idx] = static_cast<int32_t>(best_i);
  }
}

/// dx[i] = sum of g over the windows whose argmax is i, in output order.
template <typename T, bool kAdaptive>
__global__ void maxPoolBackwardKernel(const T* __restrict__ go, const int32_t* __restrict__ arg, T* __restrict__ dx,
                                      PoolGeom g, int64_t total) {
  using C = Cmp<T>;
  KILN_GRID_STRIDE(idx, total) {
    const int64_t ix = idx % g.w, iy = (idx / g.w) % g.h, p = idx / (g.w * g.h);
    int64_t oy0, oy1, ox0, ox1;  // candidate windows (inclusive)
    if constexpr (kAdaptive) {
      oy0 = (iy * g.oh) / g.h, oy1 = ((iy + 1) * g.oh - 1) / g.h;
      ox0 = (ix * g.ow) / g.w, ox1 = ((ix + 1) * g.ow - 1) / g.w;
    } else {
      oy0 = floorDiv(iy + g.ph - (g.kh - 1) * g.dh + g.sh - 1, g.sh), oy1 = floorDiv(iy + g.ph, g.sh);
      ox0 = floorDiv(ix + g.pw - (g.kw - 1) * g.dw + g.sw - 1, g.sw), ox1 = floorDiv(ix + g.pw, g.sw);
    }
    oy0 = max(oy0, int64_t{0}), ox0 = max(ox0, int64_t{0});
    oy1 = min(oy1, g.oh - 1), ox1 = min(ox1, g.ow - 1);
    const int32_t me = static_cast<int32_t>(iy * g.w + ix);
    const int64_t base = p * g.oh * g.ow;
    C acc = C(0);
    for (int64_t oy = oy0; oy <= oy1; ++oy)
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const int64_t o = base + oy * g.ow + ox;
        if (arg[o] == me) acc += load<C>(go[o]);
      }
    dx[idx] = store<T>(acc);
  }
}

template <typename T>
__global__ void avgPoolBackwardKernel(const T* __restrict__ go, T* __restrict__ dx, PoolGeom g, bool include_pad,
                                      int64_t divisor_override, int64_t total) {
  using C = Cmp<T>;
  KILN_GRID_STRIDE(idx, total) {
    const int64_t ix = idx % g.w, iy = (idx / g.w) % g.h, p = idx / (g.w * g.h);
    // Windows starting at most kernel-1 before the element (padded coordinates).
    const int64_t oy0 = max(floorDiv(iy + g.ph - g.kh, g.sh) + 1, int64_t{0});
    const int64_t oy1 = min(floorDiv(iy + g.ph, g.sh), g.oh - 1);
    const int64_t ox0 = max(floorDiv(ix + g.pw - g.kw, g.sw) + 1, int64_t{0});
    const int64_t ox1 = min(floorDiv(ix + g.pw, g.sw), g.ow - 1);
    const int64_t base = p * g.oh * g.ow;
    C acc = C(0);
    for (int64_t oy = oy0; oy <= oy1; ++oy)
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const AvgWindow w = avgWindow(g, oy, ox, include_pad, divisor_override);
        if (iy < w.y0 || iy >= w.y1 || ix < w.x0 || ix >= w.x1) continue;
        acc += load<C>(go[base + oy * g.ow + ox]) / static_cast<C>(w.div);
      }
    dx[idx] = store<T>(acc);
  }
}

template <typename T>
__global__ void adaptiveAvgBackwardKernel(const T* __restrict__ go, T* __restrict__ dx, PoolGeom g, int64_t total) {
  using C = Cmp<T>;
  KILN_GRID_STRIDE(idx, total) {
    const int64_t ix = idx % g.w, iy = (idx / g.w) % g.h, p = idx / (g.w * g.h);
    const int64_t oy0 = (iy * g.oh) / g.h, oy1 = min(((iy + 1) * g.oh - 1) / g.h, g.oh - 1);
    const int64_t ox0 = (ix * g.ow) / g.w, ox1 = min(((ix + 1) * g.ow - 1) / g.w, g.ow - 1);
    const int64_t base = p * g.oh * g.ow;
    C acc = C(0);
    for (int64_t oy = oy0; oy <= oy1; ++oy) {
      const int64_t y0 = adaptiveStart(oy, g.h, g.oh), y1 = adaptiveEnd(oy, g.h, g.oh);
      if (iy < y0 || iy >= y1) continue;
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const int64_t x0 = adaptiveStart(ox, g.w, g.ow), x1 = adaptiveEnd(ox, g.w, g.ow);
        if (ix < x0 || ix >= x1) continue;
        acc += load<C>(go[base + oy * g.ow + ox]) / static_cast<C>(y1 - y0) / static_cast<C>(x1 - x0);
      }
    }
    dx[idx] = store<T>(acc);
  }
}

template <typename T>
__global__ void channelBiasKernel(T* __restrict__ y, const T* __restrict__ b, int64_t channels, int64_t inner,
                                  int64_t total) {
  using C = Cmp<T>;
  KILN_GRID_STRIDE(idx, total) {
    y[idx] = store<T>(load<C>(y[idx]) + load<C>(b[(idx / inner) % channels]));
  }
}

#undef KILN_GRID_STRIDE

// ---- host side ------------------------------------------------------------------------------

template <typename Kernel, typename... Args>
void launch(Kernel kernel, const char* name, int64_t total, CudaContext& ctx, Args... args) {
  if (total <= 0) return;
  kernel<<<gridFor(total, kThreads), kThreads, 0, ctx.stream>>>(args..., total);
  checkLaunch(name, ctx.node);
}

bool floatInput(const Node& n) {
  return isFloating(n.input(0)->dtype());
}

/// Max backward: g and x of one dtype, plane indices within int32.
bool maxBackwardSupports(const Node& n) {
  if (!floatInput(n) || n.input(1)->dtype() != n.input(0)->dtype()) return false;
  const Shape& x = n.input(1)->shape();
  return x[x.size() - 2] * x[x.size() - 1] <= INT32_MAX;
}

size_t maxBackwardWorkspace(const Node& n) {
  return static_cast<size_t>(n.input(0)->type().numel()) * sizeof(int32_t);
}

void maxPool(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out, CudaContext& ctx) {
  const PoolGeom g = poolGeom(n, in[0].shape(), out[0].shape(), true);
  dispatchFloating(in[0].dtype(), "max_pool2d", [&](auto z) {
    using T = decltype(z);
    launch(maxPoolKernel<T>, "max_pool2d", out[0].numel(), ctx, in[0].as<const T>(), out[0].as<T>(), g);
  });
}

void avgPool(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out, CudaContext& ctx) {
  const PoolGeom g = poolGeom(n, in[0].shape(), out[0].shape(), true);
  const bool include_pad = n.i("count_include_pad") != 0;
  const int64_t divisor_override = n.i("divisor_override");
  dispatchFloating(in[0].dtype(), "avg_pool2d", [&](auto z) {
    using T = decltype(z);
    launch(avgPoolKernel<T>, "avg_pool2d", out[0].numel(), ctx, in[0].as<const T>(), out[0].as<T>(), g, include_pad,
           divisor_override);
  });
}

template <bool kMax>
void adaptivePool(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                  CudaContext& ctx) {
  const PoolGeom g = poolGeom(n, in[0].shape(), out[0].shape(), false);
  dispatchFloating(in[0].dtype(), n.op().c_str(), [&](auto z) {
    using T = decltype(z);
    launch(adaptivePoolKernel<T, kMax>, kMax ? "adaptive_max_pool2d" : "adaptive_avg_pool2d", out[0].numel(), ctx,
           in[0].as<const T>(), out[0].as<T>(), g);
  });
}

template <bool kAdaptive>
void maxPoolBackward(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                     CudaContext& ctx) {
  // (g, x) -> dx shaped like x
  const PoolGeom g = poolGeom(n, in[1].shape(), in[0].shape(), !kAdaptive);
  if (out[0].numel() == 0) return;
  if (in[0].numel() > 0 && ctx.workspace_bytes < maxBackwardWorkspace(n))
    fail(n.describe() + ": max pool backward needs " + std::to_string(maxBackwardWorkspace(n)) +
         " bytes of workspace, got " + std::to_string(ctx.workspace_bytes));
  auto* arg = static_cast<int32_t*>(ctx.workspace);
  dispatchFloating(in[0].dtype(), n.op().c_str(), [&](auto z) {
    using T = decltype(z);
    launch(argmaxKernel<T, kAdaptive>, "pool argmax", in[0].numel(), ctx, in[1].as<const T>(), arg, g);
    launch(maxPoolBackwardKernel<T, kAdaptive>, n.op().c_str(), out[0].numel(), ctx, in[0].as<const T>(),
           static_cast<const int32_t*>(arg), out[0].as<T>(), g);
  });
}

void avgPoolBackward(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                     CudaContext& ctx) {
  const PoolGeom g = poolGeom(n, out[0].shape(), in[0].shape(), true);
  const bool include_pad = n.i("count_include_pad") != 0;
  const int64_t divisor_override = n.i("divisor_override");
  dispatchFloating(in[0].dtype(), "avg_pool2d_backward", [&](auto z) {
    using T = decltype(z);
    launch(avgPoolBackwardKernel<T>, "avg_pool2d_backward", out[0].numel(), ctx, in[0].as<const T>(), out[0].as<T>(), g,
           include_pad, divisor_override);
  });
}

void adaptiveAvgBackward(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                         CudaContext& ctx) {
  const PoolGeom g = poolGeom(n, out[0].shape(), in[0].shape(), false);
  dispatchFloating(in[0].dtype(), "adaptive_avg_pool2d_backward", [&](auto z) {
    using T = decltype(z);
    launch(adaptiveAvgBackwardKernel<T>, "adaptive_avg_pool2d_backward", out[0].numel(), ctx, in[0].as<const T>(),
           out[0].as<T>(), g);
  });
}

}  // namespace

void enqueueChannelBias(const DeviceTensor& y, const DeviceTensor& bias, CudaContext& ctx) {
  const Shape& s = y.shape();
  const int64_t channels = s.at(1), inner = numelOf(Shape(s.begin() + 2, s.end()));
  if (channels == 0 || inner == 0) return;
  dispatchFloating(y.dtype(), "conv2d bias", [&](auto z) {
    using T = decltype(z);
    launch(channelBiasKernel<T>, "conv2d bias", y.numel(), ctx, y.as<T>(), bias.as<const T>(), channels, inner);
  });
}

void registerCudaPoolKernels(CudaKernelRegistry& r) {
  auto def = [](const char* op, KernelPredicate pred, CudaKernelFn fn, WorkspaceFn ws = nullptr) {
    CudaKernelDef k;
    k.op = op;
    k.dialect = "cuda";
    k.name = std::string("cuda.") + op;
    k.priority = 0;
    k.supports = pred;
    k.fn = fn;
    k.workspace = ws;
    return k;
  };
  r.add(def("max_pool2d", floatInput, maxPool));
  r.add(def("avg_pool2d", floatInput, avgPool));
  r.add(def("adaptive_avg_pool2d", floatInput, adaptivePool<false>));
  r.add(def("adaptive_max_pool2d", floatInput, adaptivePool<true>));
  r.add(def("max_pool2d_backward", maxBackwardSupports, maxPoolBackward<false>, maxBackwardWorkspace));
  r.add(def("adaptive_max_pool2d_backward", maxBackwardSupports, maxPoolBackward<true>, maxBackwardWorkspace));
  r.add(def("avg_pool2d_backward", floatInput, avgPoolBackward));
  r.add(def("adaptive_avg_pool2d_backward", floatInput, adaptiveAvgBackward));
}

}  // namespace kiln::cuda
