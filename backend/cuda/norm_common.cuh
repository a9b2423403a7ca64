// What the CUDA softmax and normalization kernels share (kernels_softmax.cu,
// kernels_norm.cu): float helpers, [outer, size, inner] splits around an axis,
// and the deterministic reduction engine the norms take their statistics
// with: row and column kernels over a reduce_plan.h Plan (the plan
// kernels_reduction.cu runs by), split over blocks when outputs are few,
// partials combined in a fixed order by a second kernel; an op's `finish`
// turns each output's sums into what the elementwise pass needs. Also the
// dtype rules of the parameters and the registration helper. Only .cu files
// include this.
#pragma once

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

namespace kiln::cuda::norm {

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

constexpr int kThreads = kPlanThreads;
constexpr int kWarpsPerBlock = kThreads / 32;

/// [outer, size, inner] around `dim` (a 0-d tensor is [1, 1, 1]).
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
inline AxisSplit splitAt(const Shape& s, int64_t dim) {
  AxisSplit a;
  const int64_t rank = static_cast<int64_t>(s.size());
  if (rank == 0) return a;
  const int64_t axis = normalizeAxis(dim, rank);
  for (int64_t d = 0; d < rank; ++d) (d < axis ? a.outer : d > axis ? a.inner : a.size) *= s[d];
  return a;
}

// ---- the reduction engine ------------------------------------------------------
// Row and column kernels over a reduce_plan.h Plan (the plan
// kernels_reduction.cu runs by), for ops that read their own inputs:
// Op: Acc, Ctx, kShifted; init(); step(Acc&, const Ctx&, flat input offset)
// reads what it needs; combine(Acc&, const Acc&); finish(const Acc&, const
// Ctx&, o) stores whatever the op produces for output o. The context of an
// output is op.ctx(o), or with kShifted the shift of its sums: the mean of
// op.sample(offset) over 8 elements spread across the output's slice (so
// one outlying element cannot make the shifted sums cancel).

inline size_t partialBytes(const Plan& p, size_t acc) {
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
inline bool paramsLike(const Node& n, std::initializer_list<size_t> params, DType x) {
  for (size_t i : params)
    if (i < n.numInputs() && n.input(i)->dtype() != x) return false;
  return true;
}

inline bool paramsOk(const Node& n, size_t x_input, std::initializer_list<size_t> params) {
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

inline void add(CudaKernelRegistry& r, const char* op, CudaKernelFn fn, WorkspaceFn ws, KernelPredicate supports,
                bool writes_over_input = false) {
  CudaKernelDef d = ownCudaKernel(op, fn, ws, supports);
  d.writes_over_input = writes_over_input;
  r.add(std::move(d));
}

inline bool floatInput0(const Node& n) {
  return isFloating(n.input(0)->dtype());
}
inline bool floatInput1(const Node& n) {
  return isFloating(n.input(1)->dtype()) && n.input(0)->dtype() == n.input(1)->dtype();
}

}  // namespace kiln::cuda::norm
