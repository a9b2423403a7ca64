// CUDA kernels of normalization and softmax (core/ops/nn.cpp, norm_grad.cpp):
//   softmax, log_softmax, softmax_backward, log_softmax_backward {dim}
//   layer_norm, layer_norm_backward {normalized_shape, eps}
//   batch_norm {training, momentum, eps}, batch_norm_backward {training, eps}
//   group_norm, group_norm_backward {num_groups, eps}
// Formulas are the CPU reference's (backend/cpu/kernels_norm.cpp,
// kernels_norm_grad.cpp, kernels_nn.cpp), computed in fp32 for
// f32/f16/bf16 (fp64 for f64).
//
// Row-wise ops (softmax along the innermost dim, layer_norm) run a warp per
// row when the row fits in registers (up to 1024 elements: one read, exact
// two-pass statistics), else a 256-thread block per row with 16-byte vector
// loads: softmax keeps an online (max, sum) pair so the row is read twice
// (statistics, then output); layer_norm accumulates shifted sums (x - K and
// its square, K a sampled shift) so a large mean does not cancel the
// variance. Softmax along an outer dim walks each (outer, inner) column with
// one thread (coalesced across inner).
//
// Statistics over several dims (batch_norm's per-channel sums, group_norm's
// per-group sums, the weight/bias gradients of every norm) run one
// deterministic reduction engine over the plan kernels_reduction.cu runs by
// (cuda_reduce.cuh): dims merged into kept/reduced runs, a row kernel
// (innermost run reduced) or a column kernel (innermost run kept), split
// over blocks when outputs are few, partials combined in a fixed order by a
// second kernel. An op's `finish` turns each output's sums into what the
// elementwise pass needs (scale and shift, the backward's coefficients, new
// running stats).
// Per-slice statistics are sums shifted by the mean of 8 elements spread
// across the slice, so mean and variance come out of one read without a
// large mean cancelling the variance.
//
// Parameters (weight, bias, running stats) have x's dtype, or f32 when x is
// f16/bf16 (mixed precision); other mixes have no CUDA kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_rowwise.cuh"
#include "core/ops/op_helpers.h"

namespace kiln::cuda {
namespace {

// ---- math ----------------------------------------------------------------------

__device__ __forceinline__ float sqrtC(float v) {
  return sqrtf(v);
}
__device__ __forceinline__ double sqrtC(double v) {
  return sqrt(v);
}

template <class C>
struct Pair {
  C a, b;
};
template <class C>
struct Quad {
  C a, b, c, d;
};

struct AddPair {
  template <class C>
  __device__ Pair<C> operator()(Pair<C> x, Pair<C> y) const {
    return {x.a + y.a, x.b + y.b};
  }
};
struct AddQuad {
  template <class C>
  __device__ Quad<C> operator()(Quad<C> x, Quad<C> y) const {
    return {x.a + y.a, x.b + y.b, x.c + y.c, x.d + y.d};
  }
};

size_t alignUp(size_t v) {
  return (v + 255) / 256 * 256;
}

constexpr int kThreads = kPlanThreads;
constexpr int kWarpsPerBlock = kThreads / 32;

void* requireWorkspace(CudaContext& ctx, size_t bytes) {
  if (bytes > ctx.workspace_bytes)
    fail((ctx.node ? ctx.node->describe() : std::string("CUDA norm kernel")) + ": needs " + std::to_string(bytes) +
         " bytes of workspace, got " + std::to_string(ctx.workspace_bytes));
  return ctx.workspace;
}

/// [outer, size, inner] around `dim` (a 0-d tensor is [1, 1, 1]).
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
AxisSplit splitAt(const Shape& s, int64_t dim) {
  AxisSplit a;
  const int64_t rank = static_cast<int64_t>(s.size());
  if (rank == 0) return a;
  const int64_t axis = normalizeAxis(dim, rank);
  for (int64_t d = 0; d < rank; ++d) (d < axis ? a.outer : d > axis ? a.inner : a.size) *= s[d];
  return a;
}

// ---- the reduction engine ------------------------------------------------------
// Row and column kernels over a cuda_reduce.cuh Plan (the plan
// kernels_reduction.cu runs by), for ops that read their own inputs:
// Op: Acc, Ctx, kShifted; init(); step(Acc&, const Ctx&, flat input offset)
// reads what it needs; combine(Acc&, const Acc&); finish(const Acc&, const
// Ctx&, o) stores whatever the op produces for output o. The context of an
// output is op.ctx(o), or with kShifted the shift of its sums: the mean of
// op.sample(offset) over 8 elements spread across the output's slice (so
// one outlying element cannot make the shifted sums cancel).

size_t partialBytes(const Plan& p, size_t acc) {
  return p.splits > 1 ? alignUp(static_cast<size_t>(p.outputs * p.splits) * acc) : 0;
}

/// Flat input offset of reduced index t of output o.
__device__ __forceinline__ int64_t offsetOf(const Plan& p, int64_t o, int64_t t) {
  if (p.row) {
    const int64_t base = p.kept.offset(o);
    return p.multi ? base + p.red.offset(t / p.inner) + t % p.inner : base + t;
  }
  const int64_t base = p.kept.offset(o / p.inner) + o % p.inner;
  return p.multi ? base + p.red.offset(t) : base + t * p.red.stride[0];
}

constexpr int kShiftSamples = 8;

template <class Op>
__device__ typename Op::Ctx ctxOf(const Op& op, const Plan& p, int64_t o) {
  if constexpr (Op::kShifted) {
    using C = typename Op::Ctx;
    const int64_t m = p.count < kShiftSamples ? p.count : kShiftSamples;
    C sum = C(0);
    for (int64_t j = 0; j < m; ++j) sum += op.sample(offsetOf(p, o, j * p.count / m));
    return m > 0 ? sum / C(m) : C(0);
  } else {
    return op.ctx(o);
  }
}

template <class Op, bool kMulti>
__global__ void __launch_bounds__(kThreads) rowReduceKernel(Op op, typename Op::Acc* __restrict__ partial, Plan p) {
  using Acc = typename Op::Acc;
  __shared__ __align__(16) unsigned char raw[32 * sizeof(Acc)];
  const int W = p.W, tx = threadIdx.x;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * p.H + threadIdx.y;
  const int64_t items = p.outputs * p.splits;
  Acc a = op.init();
  int64_t o = 0;
  typename Op::Ctx c{};
  if (item < items) {
    o = item / p.splits;
    const int64_t s = item % p.splits;
    c = ctxOf(op, p, o);
    const int64_t base = p.kept.offset(o);
    const int64_t begin = s * p.chunk, end = p.count < begin + p.chunk ? p.count : begin + p.chunk;
    auto at = [&](int64_t t) { return p.rowOffset<kMulti>(base, t); };
    int64_t t = begin + tx;
    for (; t + 3 * W < end; t += 4 * W) {
      op.step(a, c, at(t));
      op.step(a, c, at(t + W));
      op.step(a, c, at(t + 2 * W));
      op.step(a, c, at(t + 3 * W));
    }
    for (; t < end; t += W) op.step(a, c, at(t));
  }
  a = reduceAcrossX(op, a, W, raw);
  if (tx == 0 && item < items) {
    if (p.splits == 1)
      op.finish(a, c, o);
    else
      partial[item] = a;
  }
}

template <class Op, bool kMulti>
__global__ void __launch_bounds__(kThreads) colReduceKernel(Op op, typename Op::Acc* __restrict__ partial, Plan p) {
  using Acc = typename Op::Acc;
  __shared__ __align__(16) unsigned char raw[kThreads * sizeof(Acc)];
  Acc* sm = reinterpret_cast<Acc*>(raw);
  const int bx = p.W, by = p.H, tx = threadIdx.x, ty = threadIdx.y;
  const int64_t b = blockIdx.x;
  const int64_t s = b % p.splits, rest = b / p.splits, xt = rest % p.xtiles, pp = rest / p.xtiles;
  const int64_t i = xt * bx + tx;
  const int64_t o = pp * p.inner + i;
  Acc a = op.init();
  typename Op::Ctx c{};
  if (i < p.inner) {
    c = ctxOf(op, p, o);
    const int64_t base = p.kept.offset(pp) + i;
    const int64_t begin = s * p.chunk, end = p.count < begin + p.chunk ? p.count : begin + p.chunk;
    auto at = [&](int64_t r) { return p.colOffset<kMulti>(base, r); };
    int64_t r = begin + ty;
    for (; r + 3 * by < end; r += 4 * by) {
      op.step(a, c, at(r));
      op.step(a, c, at(r + by));
      op.step(a, c, at(r + 2 * by));
      op.step(a, c, at(r + 3 * by));
    }
    for (; r < end; r += by) op.step(a, c, at(r));
  }
  reduceAcrossY(op, a, sm, bx, by);
  if (ty == 0 && i < p.inner) {
    if (p.splits == 1)
      op.finish(sm[tx], c, o);
    else
      partial[o * p.splits + s] = sm[tx];
  }
}

template <class Op>
__global__ void __launch_bounds__(kThreads)
    finalizeKernel(Op op, const typename Op::Acc* __restrict__ partial, Plan p) {
  using Acc = typename Op::Acc;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  Acc a = op.init();
  if (o < p.outputs)
    for (int64_t k = lane; k < p.splits; k += 32) op.combine(a, partial[o * p.splits + k]);
  for (int off = 16; off > 0; off /= 2) op.combine(a, shflDown(a, off, 32));
  if (lane == 0 && o < p.outputs) op.finish(a, ctxOf(op, p, o), o);
}

template <class Op>
void runReduce(const Op& op, void* partial, const Plan& p, CudaContext& ctx) {
  using Acc = typename Op::Acc;
  if (p.outputs == 0) return;
  Acc* pp = static_cast<Acc*>(partial);
  const dim3 block(p.W, p.H);
  const unsigned grid = static_cast<unsigned>(p.blocks);
  if (p.row) {
    if (p.multi)
      rowReduceKernel<Op, true><<<grid, block, 0, ctx.stream>>>(op, pp, p);
    else
      rowReduceKernel<Op, false><<<grid, block, 0, ctx.stream>>>(op, pp, p);
  } else {
    if (p.multi)
      colReduceKernel<Op, true><<<grid, block, 0, ctx.stream>>>(op, pp, p);
    else
      colReduceKernel<Op, false><<<grid, block, 0, ctx.stream>>>(op, pp, p);
  }
  checkLaunch(p.row ? "rowReduceKernel" : "colReduceKernel", ctx.node);
  if (p.splits > 1) {
    finalizeKernel<Op>
        <<<static_cast<unsigned>(ceilDiv(p.outputs, kWarpsPerBlock)), kThreads, 0, ctx.stream>>>(op, pp, p);
    checkLaunch("finalizeKernel", ctx.node);
  }
}

/// Elementwise pass over [segments, inner] (segment = n * C + c): a tile of
/// the segment per block when segments are long, else a flat grid-stride
/// loop. f(segment, flat index).
template <class F>
__global__ void __launch_bounds__(kThreads) segmentTiledKernel(F f, int64_t inner, int64_t tiles) {
  const int64_t seg = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int64_t k0 = tile * (4 * kThreads) + threadIdx.x;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int64_t k = k0 + q * kThreads;
    if (k < inner) f(seg, seg * inner + k);
  }
}

template <class F>
__global__ void __launch_bounds__(kThreads) segmentFlatKernel(F f, int64_t total, int64_t inner) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    f(i / inner, i);
}

template <class F>
void mapSegments(const F& f, int64_t segments, int64_t inner, CudaContext& ctx) {
  const int64_t total = segments * inner;
  if (total == 0) return;
  const int64_t tiles = ceilDiv(inner, 4 * kThreads);
  if (inner >= kThreads && segments * tiles < (int64_t{1} << 31)) {
    segmentTiledKernel<F><<<static_cast<unsigned>(segments * tiles), kThreads, 0, ctx.stream>>>(f, inner, tiles);
    checkLaunch("segmentTiledKernel", ctx.node);
  } else {
    segmentFlatKernel<F><<<gridFor(total), kThreads, 0, ctx.stream>>>(f, total, inner);
    checkLaunch("segmentFlatKernel", ctx.node);
  }
}

/// Parameter dtypes: P is T when every parameter input has x's dtype, float
/// when x is f16/bf16 and every parameter is f32.
bool paramsLike(const Node& n, std::initializer_list<size_t> params, DType x) {
  for (size_t i : params)
    if (i < n.numInputs() && n.input(i)->dtype() != x) return false;
  return true;
}

bool paramsOk(const Node& n, size_t x_input, std::initializer_list<size_t> params) {
  const DType x = n.input(x_input)->dtype();
  if (!isFloating(x)) return false;
  if (paramsLike(n, params, x)) return true;
  return (x == DType::F16 || x == DType::BF16) && paramsLike(n, params, DType::F32);
}

/// fn(T{}, P{}) for x's dtype T and the parameters' P.
template <class Fn>
void dispatchNorm(const Node& n, size_t x_input, std::initializer_list<size_t> params, Fn&& fn) {
  const DType x = n.input(x_input)->dtype();
  const bool same = paramsLike(n, params, x);
  dispatchFloating(x, n.op().c_str(), [&](auto t) {
    using T = decltype(t);
    if (same) {
      fn(T{}, T{});
    } else if constexpr (kIsHalf<T>) {
      if (!paramsLike(n, params, DType::F32)) fail(n.describe() + ": parameters must have x's dtype or f32");
      fn(T{}, float{});
    } else {
      fail(n.describe() + ": parameters must have x's dtype");
    }
  });
}

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

// ---- layer_norm ----------------------------------------------------------------

struct RowSplit {
  int64_t rows = 0, n = 0;
};
RowSplit layerRows(const Node& n, int64_t numel) {
  RowSplit r;
  r.n = numelOf(n.is("normalized_shape"));
  r.rows = r.n ? numel / r.n : 0;
  return r;
}

template <class T, class P, int kPer>
__global__ void __launch_bounds__(kThreads)
    layerNormWarpKernel(const T* __restrict__ x, const P* __restrict__ w, const P* __restrict__ b, T* __restrict__ y,
                        int64_t rows, int n, double eps) {
  using C = Cmp<T>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* src = x + row * n;
  C v[kPer];
  C s = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    v[q] = k < n ? load<C>(src[k]) : C(0);
    s += v[q];
  }
  const C mean = warpAll(s, AddOne{}) / C(n);
  C sq = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const C d = q * 32 + lane < n ? v[q] - mean : C(0);
    sq += d * d;
  }
  const C var = warpAll(sq, AddOne{}) / C(n);
  const C rstd = C(1) / sqrtC(var + C(eps));
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    if (k < n) y[row * n + k] = store<T>((v[q] - mean) * rstd * load<C>(w[k]) + load<C>(b[k]));
  }
}

/// The shift of a long row's sums: the mean of 8 elements spread across it.
template <class T>
__device__ __forceinline__ Cmp<T> rowShift(const T* row, int64_t n) {
  using C = Cmp<T>;
  C sum = C(0);
#pragma unroll
  for (int j = 0; j < kShiftSamples; ++j) sum += load<C>(row[j * n / kShiftSamples]);
  return sum / C(kShiftSamples);
}

/// Mean and biased variance from sums of d = x - K and d^2 over n values.
template <class C>
__device__ __forceinline__ void shiftedMoments(C K, C s1, C s2, int64_t n, C& mean, C& var) {
  const C m1 = s1 / C(n);
  mean = K + m1;
  var = s2 / C(n) - m1 * m1;
  if (var < C(0)) var = C(0);
}

template <class T, class P>
__global__ void __launch_bounds__(kThreads)
    layerNormBlockKernel(const T* __restrict__ x, const P* __restrict__ w, const P* __restrict__ b, T* __restrict__ y,
                         int64_t rows, int64_t n, double eps) {
  using C = Cmp<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* src = x + row * n;
    const C K = rowShift(src, n);
    Pair<C> a{C(0), C(0)};
    walkRow<T, 1, false>({src}, nullptr, n, [&](int64_t, const C(&v)[1]) {
      const C d = v[0] - K;
      a.a += d;
      a.b += d * d;
    });
    a = blockAll(a, AddPair{});
    C mean, var;
    shiftedMoments(K, a.a, a.b, n, mean, var);
    const C rstd = C(1) / sqrtC(var + C(eps));
    walkRow<T, 1, true>({src}, y + row * n, n, [&](int64_t k, const C(&v)[1]) {
      return (v[0] - mean) * rstd * load<C>(w[k]) + load<C>(b[k]);
    });
  }
}

bool layerNormSupports(const Node& n) {
  return paramsOk(n, 0, {1, 2});
}

void layerNormKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                     CudaContext& ctx) {
  const RowSplit r = layerRows(n, in[0].numel());
  if (r.rows == 0) return;
  const double eps = n.f("eps");
  dispatchNorm(n, 0, {1, 2}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    const T* x = in[0].as<T>();
    const P* w = in[1].as<P>();
    const P* b = in[2].as<P>();
    T* y = out[0].as<T>();
    if (const int per = warpPer(r.n)) {
      withPer(per, [&](auto k) {
        layerNormWarpKernel<T, P, decltype(k)::value><<<rowGrid(r.rows, kWarpsPerBlock), kThreads, 0, ctx.stream>>>(
            x, w, b, y, r.rows, static_cast<int>(r.n), eps);
      });
      checkLaunch("layerNormWarpKernel", ctx.node);
    } else {
      layerNormBlockKernel<T, P><<<rowGrid(r.rows, 1), kThreads, 0, ctx.stream>>>(x, w, b, y, r.rows, r.n, eps);
      checkLaunch("layerNormBlockKernel", ctx.node);
    }
  });
}

// ---- layer_norm_backward (g, x, w) -> (gx, gw, gb) -----------------------------
// Per row: gx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)); the row's
// mean and rstd go to the workspace for the column sums
// gw = sum_rows g * xhat, gb = sum_rows g (the reduction engine).

template <class T, class P, int kPer>
__global__ void __launch_bounds__(kThreads)
    layerNormBackwardWarpKernel(const T* __restrict__ g, const T* __restrict__ x, const P* __restrict__ w,
                                T* __restrict__ gx, Cmp<T>* __restrict__ stats, int64_t rows, int n, double eps) {
  using C = Cmp<T>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  C xv[kPer], gw[kPer];
  C s = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    xv[q] = k < n ? load<C>(x[row * n + k]) : C(0);
    gw[q] = k < n ? load<C>(g[row * n + k]) * load<C>(w[k]) : C(0);
    s += xv[q];
  }
  const C mean = warpAll(s, AddOne{}) / C(n);
  C sq = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const C d = q * 32 + lane < n ? xv[q] - mean : C(0);
    sq += d * d;
  }
  const C var = warpAll(sq, AddOne{}) / C(n);
  const C rstd = C(1) / sqrtC(var + C(eps));
  Pair<C> a{C(0), C(0)};  // sum(gh), sum(gh * xhat)
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    a.a += gw[q];
    a.b += gw[q] * ((xv[q] - mean) * rstd);
  }
  a = warpAll(a, AddPair{});
  const C m1 = a.a / C(n), m2 = a.b / C(n);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    if (k < n) gx[row * n + k] = store<T>(rstd * (gw[q] - m1 - (xv[q] - mean) * rstd * m2));
  }
  if (lane == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = rstd;
  }
}

template <class T, class P>
__global__ void __launch_bounds__(kThreads)
    layerNormBackwardBlockKernel(const T* __restrict__ g, const T* __restrict__ x, const P* __restrict__ w,
                                 T* __restrict__ gx, Cmp<T>* __restrict__ stats, int64_t rows, int64_t n, double eps) {
  using C = Cmp<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* gr = g + row * n;
    const T* xr = x + row * n;
    const C K = rowShift(xr, n);
    Quad<C> a{C(0), C(0), C(0), C(0)};  // sum d, sum d^2, sum gh, sum gh * d (d = x - K)
    walkRow<T, 2, false>({gr, xr}, nullptr, n, [&](int64_t k, const C(&v)[2]) {
      const C d = v[1] - K, gh = v[0] * load<C>(w[k]);
      a.a += d;
      a.b += d * d;
      a.c += gh;
      a.d += gh * d;
    });
    a = blockAll(a, AddQuad{});
    C mean, var;
    shiftedMoments(K, a.a, a.b, n, mean, var);
    const C rstd = C(1) / sqrtC(var + C(eps));
    const C m1 = a.c / C(n), m2 = rstd * (a.d - (mean - K) * a.c) / C(n);
    walkRow<T, 2, true>({gr, xr}, gx + row * n, n, [&](int64_t k, const C(&v)[2]) {
      return rstd * (v[0] * load<C>(w[k]) - m1 - (v[1] - mean) * rstd * m2);
    });
    if (threadIdx.x == 0) {
      stats[2 * row] = mean;
      stats[2 * row + 1] = rstd;
    }
  }
}

/// Column sums of layer_norm_backward: gw[i] = sum_r g * (x - mean_r) * rstd_r, gb[i] = sum_r g.
template <class T, class P>
struct LayerNormParamOp {
  using C = Cmp<T>;
  using Acc = Pair<C>;
  struct Ctx {};
  static constexpr bool kShifted = false;
  const T* g;
  const T* x;
  const C* stats;
  P* gw;
  P* gb;
  int64_t cols;
  __device__ Acc init() const { return {C(0), C(0)}; }
  __device__ Ctx ctx(int64_t) const { return {}; }
  __device__ void step(Acc& a, const Ctx&, int64_t off) const {
    const int64_t r = off / cols;
    const C gv = load<C>(g[off]);
    a.a += gv * ((load<C>(x[off]) - stats[2 * r]) * stats[2 * r + 1]);
    a.b += gv;
  }
  __device__ void combine(Acc& a, const Acc& b) const {
    a.a += b.a;
    a.b += b.b;
  }
  __device__ void finish(const Acc& a, const Ctx&, int64_t o) const {
    gw[o] = store<P>(a.a);
    gb[o] = store<P>(a.b);
  }
};

Plan layerParamPlan(const RowSplit& r) {
  return makePlan({r.rows, r.n}, {0});
}

size_t layerNormBackwardWorkspace(const Node& n) {
  const RowSplit r = layerRows(n, n.input(1)->type().numel());
  return alignUp(static_cast<size_t>(r.rows) * 2 * sizeof(double)) +
         partialBytes(layerParamPlan(r), 2 * sizeof(double));
}

bool layerNormBackwardSupports(const Node& n) {
  return paramsOk(n, 1, {2});
}

void layerNormBackwardKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                             CudaContext& ctx) {
  const RowSplit r = layerRows(n, in[1].numel());
  const double eps = n.f("eps");
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, layerNormBackwardWorkspace(n)));
  dispatchNorm(n, 1, {2}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    using C = Cmp<T>;
    const T* g = in[0].as<T>();
    const T* x = in[1].as<T>();
    const P* w = in[2].as<P>();
    T* gx = out[0].as<T>();
    C* stats = reinterpret_cast<C*>(ws);
    if (r.rows > 0) {
      if (const int per = warpPer(r.n)) {
        withPer(per, [&](auto k) {
          layerNormBackwardWarpKernel<T, P, decltype(k)::value>
              <<<rowGrid(r.rows, kWarpsPerBlock), kThreads, 0, ctx.stream>>>(g, x, w, gx, stats, r.rows,
                                                                             static_cast<int>(r.n), eps);
        });
        checkLaunch("layerNormBackwardWarpKernel", ctx.node);
      } else {
        layerNormBackwardBlockKernel<T, P>
            <<<rowGrid(r.rows, 1), kThreads, 0, ctx.stream>>>(g, x, w, gx, stats, r.rows, r.n, eps);
        checkLaunch("layerNormBackwardBlockKernel", ctx.node);
      }
    }
    // With no rows the column sums are zero: the engine still writes them.
    const Plan p = layerParamPlan(r);
    void* partial = ws + alignUp(static_cast<size_t>(r.rows) * 2 * sizeof(double));
    runReduce(LayerNormParamOp<T, P>{g, x, stats, out[1].as<P>(), out[2].as<P>(), r.n}, partial, p, ctx);
  });
}

// ---- batch_norm ----------------------------------------------------------------
// x is [N, C, inner...]; channel statistics reduce [N, C, inner] over {0, 2}.

struct ChannelSplit {
  int64_t batch = 0, channels = 0, inner = 1;
};
ChannelSplit channelSplit(const Shape& s) {
  ChannelSplit c;
  c.batch = s[0];
  c.channels = s[1];
  for (size_t d = 2; d < s.size(); ++d) c.inner *= s[d];
  return c;
}
Plan channelPlan(const ChannelSplit& c) {
  return makePlan({c.batch, c.channels, c.inner}, {0, 2});
}

/// The forward statistics of batch_norm and group_norm: per slice, the sums
/// of d = x - K and d^2 (K: the slice's sampled shift). An op derives from
/// it and adds finish().
template <class T>
struct ShiftedSumsOp {
  using C = Cmp<T>;
  using Acc = Pair<C>;
  using Ctx = C;
  static constexpr bool kShifted = true;
  const T* x;
  __device__ Acc init() const { return {C(0), C(0)}; }
  __device__ C sample(int64_t off) const { return load<C>(x[off]); }
  __device__ void step(Acc& a, const Ctx& K, int64_t off) const {
    const C d = load<C>(x[off]) - K;
    a.a += d;
    a.b += d * d;
  }
  __device__ void combine(Acc& a, const Acc& o) const {
    a.a += o.a;
    a.b += o.b;
  }
};

/// Training statistics: sums of d = x - K (K: the channel's sampled shift),
/// finished into the new running stats and the (scale, shift) of y = x * scale + shift.
template <class T, class P>
struct BatchNormStatsOp : ShiftedSumsOp<T> {
  using C = Cmp<T>;
  using Acc = Pair<C>;
  using Ctx = C;
  const P* w;
  const P* b;
  const P* rmean;
  const P* rvar;
  P* new_mean;
  P* new_var;
  C* coef;  // [C][2]: scale, shift
  int64_t count;
  double momentum, eps;
  __device__ void finish(const Acc& a, const Ctx& K, int64_t c) const {
    C mean = C(0), var = std::numeric_limits<C>::quiet_NaN();
    if (count > 0) shiftedMoments(K, a.a, a.b, count, mean, var);
    const C unbiased = var * C(count) / C(count - 1);
    const C mom = C(momentum);
    new_mean[c] = store<P>((C(1) - mom) * load<C>(rmean[c]) + mom * mean);
    new_var[c] = store<P>((C(1) - mom) * load<C>(rvar[c]) + mom * unbiased);
    const C inv = C(1) / sqrtC(var + C(eps)), wc = load<C>(w[c]);
    coef[2 * c] = inv * wc;
    coef[2 * c + 1] = load<C>(b[c]) - mean * inv * wc;
  }
};

/// Eval: (scale, shift) from the running stats.
template <class T, class P>
__global__ void batchNormEvalCoefKernel(const P* __restrict__ w, const P* __restrict__ b, const P* __restrict__ rmean,
                                        const P* __restrict__ rvar, Cmp<T>* __restrict__ coef, int64_t channels,
                                        double eps) {
  using C = Cmp<T>;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < channels;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const C inv = C(1) / sqrtC(load<C>(rvar[c]) + C(eps)), wc = load<C>(w[c]);
    coef[2 * c] = inv * wc;
    coef[2 * c + 1] = load<C>(b[c]) - load<C>(rmean[c]) * inv * wc;
  }
}

template <class T>
struct BatchNormApply {
  using C = Cmp<T>;
  const T* x;
  T* y;
  const C* coef;
  int64_t channels;
  __device__ void operator()(int64_t seg, int64_t i) const {
    const int64_t c = seg % channels;
    y[i] = store<T>(load<C>(x[i]) * coef[2 * c] + coef[2 * c + 1]);
  }
};

bool batchNormSupports(const Node& n) {
  return paramsOk(n, 0, {1, 2, 3, 4});
}

size_t batchNormWorkspace(const Node& n) {
  const ChannelSplit c = channelSplit(n.input(0)->shape());
  size_t bytes = alignUp(static_cast<size_t>(c.channels) * 2 * sizeof(double));
  if (n.i("training")) bytes += partialBytes(channelPlan(c), 2 * sizeof(double));
  return bytes;
}

void batchNormKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                     CudaContext& ctx) {
  const ChannelSplit cs = channelSplit(in[0].shape());
  const bool training = n.i("training") != 0;
  const double eps = n.f("eps"), momentum = n.f("momentum");
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, batchNormWorkspace(n)));
  dispatchNorm(n, 0, {1, 2, 3, 4}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    using C = Cmp<T>;
    C* coef = reinterpret_cast<C*>(ws);
    const P* w = in[1].as<P>();
    const P* b = in[2].as<P>();
    const P* rm = in[3].as<P>();
    const P* rv = in[4].as<P>();
    if (training) {
      const Plan p = channelPlan(cs);
      void* partial = ws + alignUp(static_cast<size_t>(cs.channels) * 2 * sizeof(double));
      const ShiftedSumsOp<T> sums{in[0].as<T>()};
      BatchNormStatsOp<T, P> op{sums,     w,  b, rm, rv, out[1].as<P>(), out[2].as<P>(), coef, cs.batch * cs.inner,
                                momentum, eps};
      runReduce(op, partial, p, ctx);
    } else if (cs.channels > 0) {
      batchNormEvalCoefKernel<T, P>
          <<<gridFor(cs.channels), kThreads, 0, ctx.stream>>>(w, b, rm, rv, coef, cs.channels, eps);
      checkLaunch("batchNormEvalCoefKernel", ctx.node);
    }
    mapSegments(BatchNormApply<T>{in[0].as<T>(), out[0].as<T>(), coef, cs.channels}, cs.batch * cs.channels, cs.inner,
                ctx);
  });
}

// ---- batch_norm_backward (g, x, w[, running_mean, running_var]) ----------------
// Per channel: sums of d = x - K (K: the channel's sampled shift), g and
// g * d; finished into
// gw = sum(g * (x - mean)) * invstd, gb = sum(g) and the coefficients of
//   gx = (g - grad_mean - (x - mean) * k) * scale.

/// The backward statistics of batch_norm and group_norm: per slice, the
/// sums of d = x - K, d^2 (K: the slice's sampled shift), a gradient term gh
/// and gh * d. An op derives from it and adds step() (which passes d and gh
/// to add()) and finish().
template <class T, class P>
struct ShiftedGradSumsOp {
  using C = Cmp<T>;
  using Acc = Quad<C>;
  using Ctx = C;
  static constexpr bool kShifted = true;
  const T* g;
  const T* x;
  const P* w;
  __device__ Acc init() const { return {C(0), C(0), C(0), C(0)}; }
  __device__ C sample(int64_t off) const { return load<C>(x[off]); }
  __device__ static void add(Acc& a, C d, C gh) {
    a.a += d;
    a.b += d * d;
    a.c += gh;
    a.d += gh * d;
  }
  __device__ void combine(Acc& a, const Acc& o) const {
    a.a += o.a;
    a.b += o.b;
    a.c += o.c;
    a.d += o.d;
  }
};

template <class T, class P>
struct BatchNormGradOp : ShiftedGradSumsOp<T, P> {
  using C = Cmp<T>;
  using Acc = Quad<C>;
  using Ctx = C;
  using Sums = ShiftedGradSumsOp<T, P>;
  using Sums::g, Sums::x, Sums::w;
  const P* rmean;
  const P* rvar;
  P* gw;
  P* gb;
  C* coef;  // [C][4]: mean, k, grad_mean, scale
  int64_t count;
  bool training;
  double eps;
  __device__ void step(Acc& a, const Ctx& K, int64_t off) const {
    const C d = load<C>(x[off]) - K, gv = load<C>(g[off]);
    this->add(a, d, gv);
  }
  __device__ void finish(const Acc& a, const Ctx& K, int64_t c) const {
    C mean, invstd;
    if (training) {
      C var = std::numeric_limits<C>::quiet_NaN();
      mean = C(0);
      if (count > 0) shiftedMoments(K, a.a, a.b, count, mean, var);
      invstd = C(1) / sqrtC(var + C(eps));
    } else {
      mean = load<C>(rmean[c]);
      invstd = C(1) / sqrtC(load<C>(rvar[c]) + C(eps));
    }
    // sum(g * (x - mean)) from the shifted sums.
    const C dotp = count > 0 ? a.d - (mean - K) * a.c : C(0);
    gw[c] = store<P>(count > 0 ? dotp * invstd : C(0));
    gb[c] = store<P>(a.c);
    const bool batch_stats = training && count > 0;
    coef[4 * c] = mean;
    coef[4 * c + 1] = batch_stats ? dotp * invstd * invstd / C(count) : C(0);
    coef[4 * c + 2] = batch_stats ? a.c / C(count) : C(0);
    coef[4 * c + 3] = invstd * load<C>(w[c]);
  }
};

/// gx may be g's or x's buffer (writes_over_input): each element reads g and
/// x at its index before writing there, so no pointer here is __restrict__.
template <class T>
struct BatchNormGradApply {
  using C = Cmp<T>;
  const T* g;
  const T* x;
  T* gx;
  const C* coef;
  int64_t channels;
  __device__ void operator()(int64_t seg, int64_t i) const {
    const C* k = coef + 4 * (seg % channels);
    const C gv = load<C>(g[i]), xv = load<C>(x[i]);
    gx[i] = store<T>((gv - k[2] - (xv - k[0]) * k[1]) * k[3]);
  }
};

bool batchNormBackwardSupports(const Node& n) {
  return paramsOk(n, 1, {2, 3, 4});
}

size_t batchNormBackwardWorkspace(const Node& n) {
  const ChannelSplit c = channelSplit(n.input(1)->shape());
  return alignUp(static_cast<size_t>(c.channels) * 4 * sizeof(double)) +
         partialBytes(channelPlan(c), 4 * sizeof(double));
}

void batchNormBackwardKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                             CudaContext& ctx) {
  const ChannelSplit cs = channelSplit(in[1].shape());
  const bool training = n.i("training") != 0;
  const double eps = n.f("eps");
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, batchNormBackwardWorkspace(n)));
  dispatchNorm(n, 1, {2, 3, 4}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    using C = Cmp<T>;
    C* coef = reinterpret_cast<C*>(ws);
    void* partial = ws + alignUp(static_cast<size_t>(cs.channels) * 4 * sizeof(double));
    const P* rm = training ? nullptr : in[3].as<P>();
    const P* rv = training ? nullptr : in[4].as<P>();
    const ShiftedGradSumsOp<T, P> sums{in[0].as<T>(), in[1].as<T>(), in[2].as<P>()};
    BatchNormGradOp<T, P> op{sums, rm, rv, out[1].as<P>(), out[2].as<P>(), coef, cs.batch * cs.inner, training, eps};
    runReduce(op, partial, channelPlan(cs), ctx);
    mapSegments(BatchNormGradApply<T>{in[0].as<T>(), in[1].as<T>(), out[0].as<T>(), coef, cs.channels},
                cs.batch * cs.channels, cs.inner, ctx);
  });
}

// ---- group_norm ----------------------------------------------------------------
// A (sample, group) is one contiguous run of size = (C / G) * inner: its
// statistics reduce [N * G, size] over the run.

struct GroupSplit {
  int64_t batch = 0, channels = 0, inner = 1, groups = 1, per_group = 0, size = 0;
};
GroupSplit groupSplit(const Node& n, const Shape& s) {
  GroupSplit g;
  g.batch = s[0];
  g.channels = s[1];
  for (size_t d = 2; d < s.size(); ++d) g.inner *= s[d];
  g.groups = n.i("num_groups");
  g.per_group = g.channels / g.groups;
  g.size = g.per_group * g.inner;
  return g;
}
Plan groupPlan(const GroupSplit& g) {
  return makePlan({g.batch * g.groups, g.size}, {1});
}

template <class T>
struct GroupNormStatsOp : ShiftedSumsOp<T> {
  using C = Cmp<T>;
  using Acc = Pair<C>;
  using Ctx = C;
  C* rec;  // [N * G][2]: mean, rstd
  int64_t size;
  double eps;
  __device__ void finish(const Acc& a, const Ctx& K, int64_t o) const {
    C mean = C(0), var = std::numeric_limits<C>::quiet_NaN();
    if (size > 0) shiftedMoments(K, a.a, a.b, size, mean, var);
    rec[2 * o] = mean;
    rec[2 * o + 1] = C(1) / sqrtC(var + C(eps));
  }
};

template <class T, class P>
struct GroupNormApply {
  using C = Cmp<T>;
  const T* x;
  const P* w;
  const P* b;
  T* y;
  const C* rec;
  int64_t channels, groups, per_group;
  __device__ void operator()(int64_t seg, int64_t i) const {
    const int64_t c = seg % channels, ng = (seg / channels) * groups + c / per_group;
    const C mean = rec[2 * ng], rstd = rec[2 * ng + 1], wc = load<C>(w[c]);
    const C scale = rstd * wc, shift = load<C>(b[c]) - mean * rstd * wc;
    y[i] = store<T>(load<C>(x[i]) * scale + shift);
  }
};

bool groupNormSupports(const Node& n) {
  return paramsOk(n, 0, {1, 2});
}

size_t groupNormWorkspace(const Node& n) {
  const GroupSplit g = groupSplit(n, n.input(0)->shape());
  return alignUp(static_cast<size_t>(g.batch * g.groups) * 2 * sizeof(double)) +
         partialBytes(groupPlan(g), 2 * sizeof(double));
}

void groupNormKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                     CudaContext& ctx) {
  const GroupSplit gs = groupSplit(n, in[0].shape());
  const double eps = n.f("eps");
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, groupNormWorkspace(n)));
  dispatchNorm(n, 0, {1, 2}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    using C = Cmp<T>;
    C* rec = reinterpret_cast<C*>(ws);
    void* partial = ws + alignUp(static_cast<size_t>(gs.batch * gs.groups) * 2 * sizeof(double));
    runReduce(GroupNormStatsOp<T>{{in[0].as<T>()}, rec, gs.size, eps}, partial, groupPlan(gs), ctx);
    mapSegments(GroupNormApply<T, P>{in[0].as<T>(), in[1].as<P>(), in[2].as<P>(), out[0].as<T>(), rec, gs.channels,
                                     gs.groups, gs.per_group},
                gs.batch * gs.channels, gs.inner, ctx);
  });
}

// ---- group_norm_backward (g, x, w) -> (gx, gw, gb) -----------------------------
// Per (sample, group): sums of d = x - K, d^2, gh = g * w[c] and gh * d give
// mean, rstd, m1 = mean(gh), m2 = mean(gh * xhat); then
//   gx = rstd * (g * w - m1 - xhat * m2)
// and per channel gw = sum g * xhat, gb = sum g over (N, inner).

template <class T, class P>
struct GroupNormGradStatsOp : ShiftedGradSumsOp<T, P> {
  using C = Cmp<T>;
  using Acc = Quad<C>;
  using Ctx = C;
  using Sums = ShiftedGradSumsOp<T, P>;
  using Sums::g, Sums::x, Sums::w;
  C* rec;  // [N * G][4]: mean, rstd, m1, m2
  int64_t size, inner, channels;
  double eps;
  __device__ void step(Acc& a, const Ctx& K, int64_t off) const {
    const C d = load<C>(x[off]) - K;
    const C gh = load<C>(g[off]) * load<C>(w[(off / inner) % channels]);
    this->add(a, d, gh);
  }
  __device__ void finish(const Acc& a, const Ctx& K, int64_t o) const {
    C mean = C(0), var = C(0);
    if (size > 0) shiftedMoments(K, a.a, a.b, size, mean, var);
    const C rstd = C(1) / sqrtC(var + C(eps));
    rec[4 * o] = mean;
    rec[4 * o + 1] = rstd;
    rec[4 * o + 2] = size > 0 ? a.c / C(size) : C(0);
    rec[4 * o + 3] = size > 0 ? rstd * (a.d - (mean - K) * a.c) / C(size) : C(0);
  }
};

template <class T, class P>
struct GroupNormParamOp {
  using C = Cmp<T>;
  using Acc = Pair<C>;
  using Ctx = int64_t;  // the channel's group
  static constexpr bool kShifted = false;
  const T* g;
  const T* x;
  const C* rec;
  P* gw;
  P* gb;
  int64_t channels, inner, groups, per_group;
  __device__ Acc init() const { return {C(0), C(0)}; }
  __device__ Ctx ctx(int64_t c) const { return c / per_group; }
  __device__ void step(Acc& a, const Ctx& grp, int64_t off) const {
    const C* r = rec + 4 * ((off / (channels * inner)) * groups + grp);
    const C gv = load<C>(g[off]);
    a.a += gv * ((load<C>(x[off]) - r[0]) * r[1]);
    a.b += gv;
  }
  __device__ void combine(Acc& a, const Acc& o) const {
    a.a += o.a;
    a.b += o.b;
  }
  __device__ void finish(const Acc& a, const Ctx&, int64_t c) const {
    gw[c] = store<P>(a.a);
    gb[c] = store<P>(a.b);
  }
};

template <class T, class P>
struct GroupNormGradApply {
  using C = Cmp<T>;
  const T* g;
  const T* x;
  const P* w;
  T* gx;
  const C* rec;
  int64_t channels, groups, per_group;
  __device__ void operator()(int64_t seg, int64_t i) const {
    const int64_t c = seg % channels;
    const C* r = rec + 4 * ((seg / channels) * groups + c / per_group);
    const C rstd = r[1];
    gx[i] = store<T>(rstd * (load<C>(g[i]) * load<C>(w[c]) - r[2] - (load<C>(x[i]) - r[0]) * rstd * r[3]));
  }
};

bool groupNormBackwardSupports(const Node& n) {
  return paramsOk(n, 1, {2});
}

size_t groupNormBackwardWorkspace(const Node& n) {
  const GroupSplit g = groupSplit(n, n.input(1)->shape());
  const ChannelSplit c = channelSplit(n.input(1)->shape());
  return alignUp(static_cast<size_t>(g.batch * g.groups) * 4 * sizeof(double)) +
         partialBytes(groupPlan(g), 4 * sizeof(double)) + partialBytes(channelPlan(c), 2 * sizeof(double));
}

void groupNormBackwardKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                             CudaContext& ctx) {
  const GroupSplit gs = groupSplit(n, in[1].shape());
  const ChannelSplit cs = channelSplit(in[1].shape());
  const double eps = n.f("eps");
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, groupNormBackwardWorkspace(n)));
  dispatchNorm(n, 1, {2}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    using C = Cmp<T>;
    const Plan stats_plan = groupPlan(gs), param_plan = channelPlan(cs);
    C* rec = reinterpret_cast<C*>(ws);
    unsigned char* partial1 = ws + alignUp(static_cast<size_t>(gs.batch * gs.groups) * 4 * sizeof(double));
    unsigned char* partial2 = partial1 + partialBytes(stats_plan, 4 * sizeof(double));
    const T* g = in[0].as<T>();
    const T* x = in[1].as<T>();
    const P* w = in[2].as<P>();
    runReduce(GroupNormGradStatsOp<T, P>{{g, x, w}, rec, gs.size, gs.inner, gs.channels, eps}, partial1, stats_plan,
              ctx);
    runReduce(GroupNormParamOp<T, P>{g, x, rec, out[1].as<P>(), out[2].as<P>(), gs.channels, gs.inner, gs.groups,
                                     gs.per_group},
              partial2, param_plan, ctx);
    mapSegments(GroupNormGradApply<T, P>{g, x, w, out[0].as<T>(), rec, gs.channels, gs.groups, gs.per_group},
                gs.batch * gs.channels, gs.inner, ctx);
  });
}

void add(CudaKernelRegistry& r, const char* op, CudaKernelFn fn, WorkspaceFn ws, KernelPredicate supports,
         bool writes_over_input = false) {
  CudaKernelDef d;
  d.op = op;
  d.dialect = "cuda";
  d.name = std::string("cuda.") + op;
  d.priority = 0;
  d.supports = supports;
  d.fn = fn;
  d.workspace = ws;
  d.writes_over_input = writes_over_input;
  r.add(std::move(d));
}

bool floatInput0(const Node& n) {
  return isFloating(n.input(0)->dtype());
}
bool floatInput1(const Node& n) {
  return isFloating(n.input(1)->dtype()) && n.input(0)->dtype() == n.input(1)->dtype();
}

}  // namespace

void registerCudaNormKernels(CudaKernelRegistry& r) {
  add(r, "softmax", softmaxKernel<false>, nullptr, floatInput0);
  add(r, "log_softmax", softmaxKernel<true>, nullptr, floatInput0);
  add(r, "softmax_backward", softmaxBackwardKernel<false>, nullptr, floatInput1);
  add(r, "log_softmax_backward", softmaxBackwardKernel<true>, nullptr, floatInput1);
  add(r, "layer_norm", layerNormKernel, nullptr, layerNormSupports);
  add(r, "layer_norm_backward", layerNormBackwardKernel, layerNormBackwardWorkspace, layerNormBackwardSupports);
  add(r, "batch_norm", batchNormKernel, batchNormWorkspace, batchNormSupports);
  // grad_x is written by an elementwise pass after every channel's sums are
  // taken, each element after reading g and x at its index: it may overwrite
  // g or x (the op's kOutput0OverInput trait), as the CPU kernel does.
  add(r, "batch_norm_backward", batchNormBackwardKernel, batchNormBackwardWorkspace, batchNormBackwardSupports, true);
  add(r, "group_norm", groupNormKernel, groupNormWorkspace, groupNormSupports);
  add(r, "group_norm_backward", groupNormBackwardKernel, groupNormBackwardWorkspace, groupNormBackwardSupports);
}

}  // namespace kiln::cuda
