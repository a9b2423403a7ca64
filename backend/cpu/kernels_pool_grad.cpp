// CPU kernels of the pool backward ops ("cpu"; f32/f64 natively,
// f16/bf16 in f32): max_pool2d_backward, avg_pool2d_backward,
// adaptive_avg_pool2d_backward, adaptive_max_pool2d_backward. Every leading
// plane ([N, C] or [C]) is independent and handled by one thread, which
// zeroes its input-gradient plane and adds each output gradient into it, so
// overlapping windows accumulate without races and deterministically.
//
// The window arithmetic mirrors PyTorch's CPU kernels (and kernels_pool.cpp):
//  - max: the argmax is recomputed from x with PyTorch's scan: candidates in
//    row-major window order, a later one wins only if strictly greater or
//    NaN (so ties go to the first maximum and the last NaN wins), padding is
//    never a candidate, and a window of only -inf routes to its first
//    in-input element;
//  - avg: the divisor is divisor_override, or the window clipped to the
//    padded border (count_include_pad), or the window clipped to the input;
//  - adaptive: window [floor(i*in/out), ceil((i+1)*in/out)); the average's
//    gradient is g / kh / kw, divided in that order as PyTorch does.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/float_kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

/// Planes of [h, w] (the input gradient) pooled to [oh, ow] (the output gradient).
struct PoolGeom {
  int64_t planes, h, w, oh, ow;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

PoolGeom poolGeom(const Node& n, bool windowed) {
  const Shape& x = n.output()->shape();
  const Shape& g = n.input(0)->shape();
  const size_t r = x.size();
  PoolGeom p{numelOf(Shape(x.begin(), x.end() - 2)), x[r - 2], x[r - 1], g[r - 2], g[r - 1]};
  if (!windowed) return p;
  auto k = pair(n, "kernel_size");
  auto s = n.is("stride").empty() ? k : pair(n, "stride");
  auto pad = pair(n, "padding");
  p.kh = k[0], p.kw = k[1], p.sh = s[0], p.sw = s[1], p.ph = pad[0], p.pw = pad[1];
  if (n.def().findAttr("dilation")) {
    auto d = pair(n, "dilation");
    p.dh = d[0], p.dw = d[1];
  }
  return p;
}

inline int64_t adaptiveStart(int64_t i, int64_t in, int64_t out) {
  return (i * in) / out;
}
inline int64_t adaptiveEnd(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

/// Index of the window's maximum under PyTorch's rule, or -1 when the window
/// holds no input element. Rows [y0, y1) step dy, columns [x0, x1) step dx,
/// already clipped to the input.
template <typename T>
int64_t argmaxWindow(const T* src, int64_t width, int64_t y0, int64_t y1, int64_t dy, int64_t x0, int64_t x1,
                     int64_t dx) {
  if (y0 >= y1 || x0 >= x1) return -1;
  int64_t best_i = y0 * width + x0;
  T best = -std::numeric_limits<T>::infinity();
  for (int64_t iy = y0; iy < y1; iy += dy)
    for (int64_t ix = x0; ix < x1; ix += dx) {
      const T v = src[iy * width + ix];
      if (v > best || std::isnan(v)) best = v, best_i = iy * width + ix;
    }
  return best_i;
}

/// Folds window column j of one input row into the running argmax of an
/// output row under PyTorch's rule (a later candidate wins only if strictly
/// greater, or NaN). `row` is the widened row with -inf padding, which
/// never wins; `base` is the row's flat index minus the padding width.
/// Indices of I: int32_t where a plane allows, so the index and the value
/// lanes have one width and the selects vectorize (with int64_t indices
/// ResNet-50's stem pool backward took 22 ms at batch 8).
template <typename C, typename I>
void foldArgmax(const C* __restrict row, int64_t stride, I base, C* __restrict best, I* __restrict best_i, int64_t n) {
  const I step = static_cast<I>(stride);
  for (int64_t o = 0; o < n; ++o) {
    const C v = row[o * stride];
    const bool take = v > best[o] || v != v;
    best[o] = take ? v : best[o];
    best_i[o] = take ? static_cast<I>(base + static_cast<I>(o) * step) : best_i[o];
  }
}

/// X: the storage type of g, x and dx (float, double, or BFloat16, whose
/// gradients are summed in an f32 plane and rounded once, as the f32
/// kernel's result converted to bf16 would be). Row by row, as the forward
/// (kernels_pool.cpp): the window's rows in order, each widened once and
/// folded in column by column, give every output of the row its argmax in
/// PyTorch's scan order without per-element bounds checks; the gradients
/// are then added in output order. I: the index type of a plane (int32_t
/// unless a plane has 2^31 elements).
template <typename X, typename I>
void maxPoolBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  using C = compute_t<X>;
  const PoolGeom p = poolGeom(n, true);
  const X* g = in[0].data<X>();
  const X* x = in[1].data<X>();
  X* dx = allocAs(n, out, 0, in[0].dtype()).template data<X>();
  const int64_t span = std::max(p.pw + p.w, (p.ow - 1) * p.sw + (p.kw - 1) * p.dw + 1);
  constexpr C kLowest = -std::numeric_limits<C>::infinity();
  // A window with no in-input column (possible only with ceil_mode) gets no gradient.
  std::vector<int64_t> first_col(static_cast<size_t>(p.ow), -1);
  for (int64_t ox = 0; ox < p.ow; ++ox) {
    int64_t x0 = ox * p.sw - p.pw;
    const int64_t x1 = std::min(x0 + (p.kw - 1) * p.dw + 1, p.w);
    while (x0 < 0) x0 += p.dw;
    if (x0 < x1) first_col[static_cast<size_t>(ox)] = x0;
  }
#pragma omp parallel if (in[0].numel() > kOmpMinWork)
  {
    std::vector<C> row(static_cast<size_t>(span), kLowest), best(static_cast<size_t>(p.ow));
    std::vector<I> best_i(static_cast<size_t>(p.ow));
    std::vector<C> acc(std::is_same_v<X, C> ? 0 : static_cast<size_t>(p.h * p.w));
#pragma omp for
    for (int64_t q = 0; q < p.planes; ++q) {
      const X* src = x + q * p.h * p.w;
      const X* go = g + q * p.oh * p.ow;
      C* dst = std::is_same_v<X, C> ? reinterpret_cast<C*>(dx + q * p.h * p.w) : acc.data();
      std::fill(dst, dst + p.h * p.w, C(0));
      for (int64_t oy = 0; oy < p.oh; ++oy) {
        // First in-input row of the dilated window, and the clipped end.
        int64_t y0 = oy * p.sh - p.ph;
        const int64_t y1 = std::min(y0 + (p.kh - 1) * p.dh + 1, p.h);
        while (y0 < 0) y0 += p.dh;
        if (y0 >= y1) continue;
        std::fill(best.begin(), best.end(), kLowest);
        for (int64_t ox = 0; ox < p.ow; ++ox) best_i[ox] = static_cast<I>(y0 * p.w + first_col[ox]);
        for (int64_t iy = y0; iy < y1; iy += p.dh) {
          for (int64_t i = 0; i < p.w; ++i) row[p.pw + i] = static_cast<C>(src[iy * p.w + i]);
          for (int64_t j = 0; j < p.kw; ++j)
            foldArgmax(row.data() + j * p.dw, p.sw, static_cast<I>(iy * p.w - p.pw + j * p.dw), best.data(),
                       best_i.data(), p.ow);
        }
        for (int64_t ox = 0; ox < p.ow; ++ox)
          if (first_col[ox] >= 0) dst[best_i[ox]] += static_cast<C>(go[oy * p.ow + ox]);
      }
      if constexpr (!std::is_same_v<X, C>) {
        X* out_plane = dx + q * p.h * p.w;
        for (int64_t i = 0; i < p.h * p.w; ++i) out_plane[i] = static_cast<X>(acc[i]);
      }
    }
  }
}

template <typename T>
void adaptiveMaxBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const PoolGeom p = poolGeom(n, false);
  const T* g = in[0].data<T>();
  const T* x = in[1].data<T>();
  T* dx = allocAs(n, out, 0, in[0].dtype()).template data<T>();
#pragma omp parallel for if (in[0].numel() > kOmpMinWork)
  for (int64_t q = 0; q < p.planes; ++q) {
    const T* src = x + q * p.h * p.w;
    const T* go = g + q * p.oh * p.ow;
    T* dst = dx + q * p.h * p.w;
    std::fill(dst, dst + p.h * p.w, T(0));
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      const int64_t y0 = adaptiveStart(oy, p.h, p.oh), y1 = adaptiveEnd(oy, p.h, p.oh);
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        const int64_t x0 = adaptiveStart(ox, p.w, p.ow), x1 = adaptiveEnd(ox, p.w, p.ow);
        const int64_t i = argmaxWindow(src, p.w, y0, y1, 1, x0, x1, 1);
        if (i >= 0) dst[i] += go[oy * p.ow + ox];
      }
    }
  }
}

template <typename T>
void avgPoolBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const PoolGeom p = poolGeom(n, true);
  const bool include_pad = n.i("count_include_pad") != 0;
  const int64_t divisor_override = n.i("divisor_override");
  const T* g = in[0].data<T>();
  T* dx = allocAs(n, out, 0, in[0].dtype()).template data<T>();
#pragma omp parallel for if (in[0].numel() > kOmpMinWork)
  for (int64_t q = 0; q < p.planes; ++q) {
    const T* go = g + q * p.oh * p.ow;
    T* dst = dx + q * p.h * p.w;
    std::fill(dst, dst + p.h * p.w, T(0));
    for (int64_t oy = 0; oy < p.oh; ++oy)
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        // The window clipped to the padded input (count_include_pad's
        // divisor), then to the input (what receives gradient).
        int64_t y0 = oy * p.sh - p.ph, x0 = ox * p.sw - p.pw;
        int64_t y1 = std::min(y0 + p.kh, p.h + p.ph), x1 = std::min(x0 + p.kw, p.w + p.pw);
        const int64_t padded_size = (y1 - y0) * (x1 - x0);
        y0 = std::max<int64_t>(y0, 0), x0 = std::max<int64_t>(x0, 0);
        y1 = std::min(y1, p.h), x1 = std::min(x1, p.w);
        if (y0 >= y1 || x0 >= x1) continue;
        const int64_t div = divisor_override ? divisor_override : include_pad ? padded_size : (y1 - y0) * (x1 - x0);
        const T delta = go[oy * p.ow + ox] / static_cast<T>(div);
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) dst[iy * p.w + ix] += delta;
      }
  }
}

template <typename T>
void adaptiveAvgBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const PoolGeom p = poolGeom(n, false);
  const T* g = in[0].data<T>();
  T* dx = allocAs(n, out, 0, in[0].dtype()).template data<T>();
#pragma omp parallel for if (in[0].numel() > kOmpMinWork)
  for (int64_t q = 0; q < p.planes; ++q) {
    const T* go = g + q * p.oh * p.ow;
    T* dst = dx + q * p.h * p.w;
    std::fill(dst, dst + p.h * p.w, T(0));
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      const int64_t y0 = adaptiveStart(oy, p.h, p.oh), y1 = adaptiveEnd(oy, p.h, p.oh);
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        const int64_t x0 = adaptiveStart(ox, p.w, p.ow), x1 = adaptiveEnd(ox, p.w, p.ow);
        const T delta = go[oy * p.ow + ox] / static_cast<T>(y1 - y0) / static_cast<T>(x1 - x0);
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) dst[iy * p.w + ix] += delta;
      }
    }
  }
}

/// maxPoolBackwardImpl with int32_t plane indices unless a plane (with the
/// padding a window may start in) reaches 2^31 elements.
template <typename X>
void maxPoolBackwardAny(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Shape& x = n.output()->shape();
  const int64_t plane = x[x.size() - 2] * x[x.size() - 1];
  if (plane < (int64_t{1} << 30))
    maxPoolBackwardImpl<X, int32_t>(n, in, out);
  else
    maxPoolBackwardImpl<X, int64_t>(n, in, out);
}

void maxPoolBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { maxPoolBackwardAny<decltype(t)>(n, in, out); });
}
void avgPoolBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { avgPoolBackwardImpl<decltype(t)>(n, in, out); });
}
void adaptiveAvgBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { adaptiveAvgBackwardImpl<decltype(t)>(n, in, out); });
}
void adaptiveMaxBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { adaptiveMaxBackwardImpl<decltype(t)>(n, in, out); });
}

bool floatInput(const Node& n) {
  return isFloating(n.input(0)->dtype());
}

}  // namespace

void registerCpuPoolGradKernels(KernelRegistry& r) {
  r.add(
      {"max_pool2d_backward", "cpu", "cpu.max_pool2d_backward", 0, floatInput, viaComputeType<maxPoolBackwardKernel>});
  // amp's bf16 gradients and activations read directly (the same result).
  r.add({"max_pool2d_backward", "cpu", "cpu.max_pool2d_backward_bf16", 10,
         [](const Node& n) {
           return n.input(0)->dtype() == DType::BF16 && n.input(1)->dtype() == DType::BF16 &&
                  n.output(0)->dtype() == DType::BF16;
         },
         [](const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
           maxPoolBackwardAny<BFloat16>(n, in, out);
         }});
  r.add(
      {"avg_pool2d_backward", "cpu", "cpu.avg_pool2d_backward", 0, floatInput, viaComputeType<avgPoolBackwardKernel>});
  r.add({"adaptive_avg_pool2d_backward", "cpu", "cpu.adaptive_avg_pool2d_backward", 0, floatInput,
         viaComputeType<adaptiveAvgBackwardKernel>});
  r.add({"adaptive_max_pool2d_backward", "cpu", "cpu.adaptive_max_pool2d_backward", 0, floatInput,
         viaComputeType<adaptiveMaxBackwardKernel>});
}

}  // namespace kiln::cpu
