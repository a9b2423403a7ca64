// CUDA kernels of the index ops (core/ops/shape.cpp, core/ops/shape_grad.cpp),
// cumsum, cumprod and topk (core/ops/reduction.cpp):
//   index gather                 gathers, indices checked on the device
//   index_add scatter_add        base plus src at the indices
//   scatter_reduce               prod / amax / amin at the indices (scatter_add's walk)
//   cumsum                       inclusive scan per row
//   cumprod                      one thread per row, the CPU's loop
//   topk                         each element's rank in its row (how many
//                                elements beat it), the index written at
//                                that rank when it is below k
// Semantics are the CPU reference's (backend/cpu/kernels_shape*.cpp,
// kernels_reduction.cpp). An index out of range cannot throw without a
// sync: the element is skipped (a gather writes 0 there, an add adds
// nothing) and ctx.error_flag names the node.
//
// The accumulating kernels are deterministic and add in the CPU's order:
// index_add and scatter_add give each thread every contribution to its
// output elements (positions that can never collide run in parallel), so
// results match it bit for bit. cumsum accumulates in double / int64 as the
// CPU does; the long-row block scan adds in another order (an ulp of double
// at most).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/shape_common.cuh"
#include "core/ops/op_helpers.h"

namespace kiln::cuda {
namespace {

using namespace shape;

// ---- index, gather ------------------------------------------------------------------

/// x as [outer, size, inner]; out as [outer, m, inner] with m = idx.numel();
/// negative indices count from the end.
template <class E>
__global__ void __launch_bounds__(kThreads)
    indexKernel(E* out, const E* x, const void* idx, DType idt, int64_t m, int64_t size, int64_t inner, int64_t n,
                int* flag, uint64_t node) {
  for (int64_t t = firstIndex(); t < n; t += gridStride()) {
    const int64_t c = t % inner, r = t / inner, j = r % m, k = r / m;
    const int64_t v = loadIndex(idx, idt, j);
    if (v < -size || v >= size) {
      raiseError(flag, node);
      out[t] = E(0);
      continue;
    }
    out[t] = x[(k * size + (v < 0 ? v + size : v)) * inner + c];
  }
}

void indexKernelFn(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor &x = in[0], &idx = in[1];
  const int64_t axis = normalizeAxis(n.i("dim"), static_cast<int64_t>(x.shape().size()));
  const AxisSplit a = splitAt(x.shape(), axis);
  const int64_t count = out[0].numel();
  if (count == 0) return;
  dispatchBySize(dtypeSize(x.dtype()), ctx.node, [&](auto tag) {
    using E = decltype(tag);
    indexKernel<E><<<gridFor(count, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<E*>(out[0].data), static_cast<const E*>(x.data), idx.data, idx.dtype(), idx.numel(), a.size,
        a.inner, count, ctx.error_flag, ctx.node_index);
  });
  checkLaunch("cuda.index", ctx.node);
}

/// Walk over the index's shape with x's strides (the gathered dim's from the index).
struct GatherGeometry {
  int rank = 0;
  int64_t size[kMaxDims] = {};
  int64_t x_stride[kMaxDims] = {};  ///< 0 along the gathered dim
  int64_t axis_stride = 0, axis_size = 1;
};

/// torch.gather: out[i] = x[i with i[dim] = idx[i]], indices in [0, size).
template <class E>
__global__ void __launch_bounds__(kThreads) gatherKernel(E* out, const E* x, const void* idx, DType idt,
                                                         GatherGeometry g, int64_t n, int* flag, uint64_t node) {
  for (int64_t t = firstIndex(); t < n; t += gridStride()) {
    int64_t rem = t, off = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= g.rank) continue;
      off += (rem % g.size[d]) * g.x_stride[d];
      rem /= g.size[d];
    }
    const int64_t v = loadIndex(idx, idt, t);
    if (v < 0 || v >= g.axis_size) {
      raiseError(flag, node);
      out[t] = E(0);
      continue;
    }
    out[t] = x[off + v * g.axis_stride];
  }
}

void gatherKernelFn(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor &x = in[0], &idx = in[1];
  const Shape &xs = x.shape(), &is = idx.shape();
  const auto rank = static_cast<int64_t>(xs.size());
  const int64_t axis = normalizeAxis(n.i("dim"), rank);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && is[d] > xs[d])
      opFail(n, "index size " + std::to_string(is[d]) + " exceeds the input size " + std::to_string(xs[d]) +
                    " at dimension " + std::to_string(d));
  const int64_t count = idx.numel();
  if (count == 0) return;
  GatherGeometry g;
  g.rank = static_cast<int>(rank);
  const Shape xst = contiguousStrides(xs);
  for (int64_t d = 0; d < rank; ++d) {
    g.size[d] = is[d];
    g.x_stride[d] = d == axis ? 0 : xst[d];
  }
  if (rank > 0) g.axis_stride = xst[axis], g.axis_size = xs[axis];
  dispatchBySize(dtypeSize(x.dtype()), ctx.node, [&](auto tag) {
    using E = decltype(tag);
    gatherKernel<E><<<gridFor(count, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<E*>(out[0].data), static_cast<const E*>(x.data), idx.data, idx.dtype(), g, count, ctx.error_flag,
        ctx.node_index);
  });
  checkLaunch("cuda.gather", ctx.node);
}

// ---- index_add, scatter_add ---------------------------------------------------------

void copyBase(const DeviceTensor& out, const DeviceTensor& base, CudaContext& ctx) {
  if (out.data != base.data && base.bytes() > 0)
    check(cudaMemcpyAsync(out.data, base.data, base.bytes(), cudaMemcpyDeviceToDevice, ctx.stream), "copy base",
          ctx.node);
}

/// out (holding base) as [outer, size, inner], src as [outer, m, inner]: one
/// thread per (outer, inner) position adds every src[k, j, c] at out[k, pos[j], c]
/// for j ascending, so duplicate indices accumulate in the CPU's order
/// (no atomics: deterministic). Each add rounds to T, as the CPU's.
template <class T>
__global__ void __launch_bounds__(kThreads)
    indexAddKernel(T* out, const T* src, const void* idx, DType idt, int64_t m, int64_t size, int64_t inner, int64_t n,
                   int* flag, uint64_t node) {
  for (int64_t t = firstIndex(); t < n; t += gridStride()) {
    const int64_t k = t / inner, c = t % inner;
    for (int64_t j = 0; j < m; ++j) {
      const int64_t v = loadIndex(idx, idt, j);
      if (v < -size || v >= size) {
        raiseError(flag, node);
        continue;
      }
      T& w = out[(k * size + (v < 0 ? v + size : v)) * inner + c];
      w = st<T>(ld(w) + ld(src[(k * m + j) * inner + c]));
    }
  }
}

void indexAddKernelFn(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor &base = in[0], &idx = in[1], &src = in[2];
  const auto rank = static_cast<int64_t>(base.shape().size());
  const int64_t axis = normalizeAxis(n.i("dim"), rank);
  const AxisSplit a = rank == 0 ? AxisSplit{} : splitAt(base.shape(), axis);
  copyBase(out[0], base, ctx);
  const int64_t columns = a.outer * a.inner;
  if (columns == 0 || idx.numel() == 0) return;
  dispatchFloating(out[0].dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    indexAddKernel<T><<<gridFor(columns, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(out[0].data), static_cast<const T*>(src.data), idx.data, idx.dtype(), idx.numel(), a.size,
        a.inner, columns, ctx.error_flag, ctx.node_index);
  });
  checkLaunch("cuda.index_add", ctx.node);
}

/// scatter_add's walk: the index shape with dim collapsed to 1; per position
/// the offsets of index, src and out, and their strides along dim.
struct ScatterGeometry {
  int rank = 0;
  int64_t size[kMaxDims] = {};
  int64_t idx_stride[kMaxDims] = {}, src_stride[kMaxDims] = {}, out_stride[kMaxDims] = {};
  int64_t m = 1, idx_axis = 0, src_axis = 0, out_axis = 0, axis_size = 1;
};

/// Where walk position t starts in index, src and out.
struct ScatterOffsets {
  int64_t io, so, oo;
};
__device__ __forceinline__ ScatterOffsets scatterOffsets(const ScatterGeometry& g, int64_t t) {
  int64_t rem = t, io = 0, so = 0, oo = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= g.rank) continue;
    const int64_t c = rem % g.size[d];
    rem /= g.size[d];
    io += c * g.idx_stride[d];
    so += c * g.src_stride[d];
    oo += c * g.out_stride[d];
  }
  return {io, so, oo};
}

/// The walk of scatter_add / scatter_reduce along `axis` of base.
ScatterGeometry scatterGeometry(const DeviceTensor& base, const DeviceTensor& idx, const DeviceTensor& src,
                                int64_t axis) {
  const auto rank = static_cast<int64_t>(base.shape().size());
  ScatterGeometry g;
  g.rank = static_cast<int>(rank);
  const Shape ist = contiguousStrides(idx.shape()), sst = contiguousStrides(src.shape()),
              ost = contiguousStrides(base.shape());
  for (int64_t d = 0; d < rank; ++d) {
    const bool along = d == axis;
    g.size[d] = along ? 1 : idx.shape()[d];
    g.idx_stride[d] = along ? 0 : ist[d];
    g.src_stride[d] = along ? 0 : sst[d];
    g.out_stride[d] = along ? 0 : ost[d];
  }
  if (rank > 0) {
    g.m = idx.shape()[axis];
    g.idx_axis = ist[axis], g.src_axis = sst[axis], g.out_axis = ost[axis];
    g.axis_size = base.shape()[axis];
  }
  return g;
}

/// scatter_add / scatter_reduce's start: base copied to the output, the
/// walk's geometry; returns the number of walk positions (0: nothing to do).
int64_t scatterSetup(const Node& n, Ins in, Outs out, CudaContext& ctx, ScatterGeometry& g) {
  const DeviceTensor &base = in[0], &idx = in[1];
  copyBase(out[0], base, ctx);
  if (idx.numel() == 0) return 0;
  g = scatterGeometry(base, idx, in[2], normalizeAxis(n.i("dim"), static_cast<int64_t>(base.shape().size())));
  return g.m > 0 ? idx.numel() / g.m : 0;
}

/// torch.scatter_add: positions that differ outside dim never collide, so
/// one thread per position loops over dim in order (deterministic, the
/// CPU's order and rounding).
template <class T>
__global__ void __launch_bounds__(kThreads) scatterAddKernel(T* out, const T* src, const void* idx, DType idt,
                                                             ScatterGeometry g, int64_t n, int* flag, uint64_t node) {
  for (int64_t t = firstIndex(); t < n; t += gridStride()) {
    const ScatterOffsets at = scatterOffsets(g, t);
    const int64_t io = at.io, so = at.so, oo = at.oo;
    for (int64_t j = 0; j < g.m; ++j) {
      const int64_t v = loadIndex(idx, idt, io + j * g.idx_axis);
      if (v < 0 || v >= g.axis_size) {
        raiseError(flag, node);
        continue;
      }
      T& w = out[oo + v * g.out_axis];
      w = st<T>(ld(w) + ld(src[so + j * g.src_axis]));
    }
  }
}

void scatterAddKernelFn(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor &idx = in[1], &src = in[2];
  ScatterGeometry g;
  const int64_t positions = scatterSetup(n, in, out, ctx, g);
  if (positions == 0) return;
  dispatchFloating(out[0].dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    scatterAddKernel<T><<<gridFor(positions, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(out[0].data), static_cast<const T*>(src.data), idx.data, idx.dtype(), g, positions,
        ctx.error_flag, ctx.node_index);
  });
  checkLaunch("cuda.scatter_add", ctx.node);
}

/// scatter_reduce (prod, amax, amin): scatter_add's walk, one thread per
/// position combining in the CPU's order. Without include_self, a first
/// pass sets every element the thread will reach to the reduction's
/// identity (1, -inf, +inf), which the first contribution then replaces
/// exactly, as the CPU's first-touch rule does. amax/amin propagate NaN.
template <class T, int kKind>
__global__ void __launch_bounds__(kThreads)
    scatterReduceKernel(T* out, const T* src, const void* idx, DType idt, ScatterGeometry g, int64_t n,
                        bool include_self, int* flag, uint64_t node) {
  using C = decltype(ld(T{}));
  for (int64_t t = firstIndex(); t < n; t += gridStride()) {
    const ScatterOffsets at = scatterOffsets(g, t);
    const int64_t io = at.io, so = at.so, oo = at.oo;
    if (!include_self) {
      const C identity = kKind == 0 ? C(1) : kKind == 1 ? C(-INFINITY) : C(INFINITY);
      for (int64_t j = 0; j < g.m; ++j) {
        const int64_t v = loadIndex(idx, idt, io + j * g.idx_axis);
        if (v >= 0 && v < g.axis_size) out[oo + v * g.out_axis] = st<T>(identity);
      }
    }
    for (int64_t j = 0; j < g.m; ++j) {
      const int64_t v = loadIndex(idx, idt, io + j * g.idx_axis);
      if (v < 0 || v >= g.axis_size) {
        raiseError(flag, node);
        continue;
      }
      T& w = out[oo + v * g.out_axis];
      const C a = ld(w), b = ld(src[so + j * g.src_axis]);
      C r;
      if (kKind == 0)
        r = a * b;
      else if (isnan(static_cast<double>(a)) || isnan(static_cast<double>(b)))
        r = isnan(static_cast<double>(a)) ? a : b;
      else
        r = kKind == 1 ? (a > b ? a : b) : (a < b ? a : b);
      w = st<T>(r);
    }
  }
}

void scatterReduceKernelFn(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor &idx = in[1], &src = in[2];
  ScatterGeometry g;
  const int64_t positions = scatterSetup(n, in, out, ctx, g);
  if (positions == 0) return;
  const std::string& reduce = n.s("reduce");
  const int kind = reduce == "prod" ? 0 : reduce == "amax" ? 1 : 2;
  const bool include_self = n.i("include_self") != 0;
  dispatchFloating(out[0].dtype(), "scatter_reduce", [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto kernel) {
      kernel<<<gridFor(positions, kThreads), kThreads, 0, ctx.stream>>>(
          static_cast<T*>(out[0].data), static_cast<const T*>(src.data), idx.data, idx.dtype(), g, positions,
          include_self, ctx.error_flag, ctx.node_index);
    };
    if (kind == 0) launch(scatterReduceKernel<T, 0>);
    else if (kind == 1) launch(scatterReduceKernel<T, 1>);
    else launch(scatterReduceKernel<T, 2>);
  });
  checkLaunch("cuda.scatter_reduce", ctx.node);
}

// ---- cumsum ------------------------------------------------------------------------

/// Accumulator: double for floating inputs, int64 for integers and bool.
template <class T>
using acc_t = std::conditional_t<kIsFloat<T>, double, int64_t>;
/// Output element type: floating inputs keep theirs, the rest give int64.
template <class T>
using cumsum_out_t = std::conditional_t<kIsFloat<T>, T, int64_t>;

/// One thread per column (outer, inner position): the CPU's sequential loop,
/// bit for bit (a sum, or with kProduct a product).
template <class T, bool kProduct = false>
__global__ void __launch_bounds__(kThreads)
    cumsumColumnsKernel(cumsum_out_t<T>* dst, const T* src, int64_t r, int64_t inner, int64_t columns) {
  using Acc = acc_t<T>;
  for (int64_t t = firstIndex(); t < columns; t += gridStride()) {
    const int64_t base = (t / inner) * r * inner + t % inner;
    Acc acc = kProduct ? 1 : 0;
    for (int64_t k = 0; k < r; ++k) {
      if constexpr (kProduct)
        acc *= static_cast<Acc>(ld(src[base + k * inner]));
      else
        acc += static_cast<Acc>(ld(src[base + k * inner]));
      dst[base + k * inner] = conv<cumsum_out_t<T>>(acc);
    }
  }
}

template <class Acc>
__device__ __forceinline__ Acc shuffleUp(Acc v, int delta) {
  if constexpr (std::is_same_v<Acc, double>)
    return __shfl_up_sync(0xffffffffu, v, delta);
  else
    return static_cast<Acc>(__shfl_up_sync(0xffffffffu, static_cast<long long>(v), delta));
}

constexpr int kScanItems = 4;

/// One block per column (long columns): tiles of kThreads * kScanItems
/// elements, each thread scanning kScanItems consecutive ones, a block-wide
/// scan of the thread totals (warp shuffles), and a carry across tiles.
template <class T>
__global__ void __launch_bounds__(kThreads)
    cumsumScanKernel(cumsum_out_t<T>* dst, const T* src, int64_t r, int64_t inner, int64_t columns) {
  using Acc = acc_t<T>;
  constexpr int kWarps = kThreads / 32;
  __shared__ Acc warp_total[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t col = blockIdx.x; col < columns; col += gridDim.x) {
    const int64_t base = (col / inner) * r * inner + col % inner;
    Acc carry = 0;
    for (int64_t tile = 0; tile < r; tile += static_cast<int64_t>(kThreads) * kScanItems) {
      const int64_t start = tile + static_cast<int64_t>(threadIdx.x) * kScanItems;
      Acc v[kScanItems];
      Acc total = 0;
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t i = start + k;
        total += i < r ? static_cast<Acc>(ld(src[base + i * inner])) : Acc(0);
        v[k] = total;
      }
      Acc x = total;  // inclusive scan of the totals within the warp
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const Acc y = shuffleUp(x, o);
        if (lane >= o) x += y;
      }
      if (lane == 31) warp_total[warp] = x;
      __syncthreads();
      if (warp == 0) {
        Acc w = lane < kWarps ? warp_total[lane] : Acc(0);
#pragma unroll
        for (int o = 1; o < kWarps; o <<= 1) {
          const Acc y = shuffleUp(w, o);
          if (lane >= o) w += y;
        }
        if (lane < kWarps) warp_total[lane] = w;
      }
      __syncthreads();
      const Acc before = carry + (warp > 0 ? warp_total[warp - 1] : Acc(0)) + (x - total);
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t i = start + k;
        if (i < r) dst[base + i * inner] = conv<cumsum_out_t<T>>(before + v[k]);
      }
      carry += warp_total[kWarps - 1];
      __syncthreads();  // warp_total is rewritten by the next tile
    }
  }
}

/// Inclusive prefix sum along `dim`. Long rows (or a few long columns) scan
/// with a block each; otherwise one thread runs each column sequentially.
void cumsumKernelFn(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& x = in[0];
  const auto rank = static_cast<int64_t>(x.shape().size());
  const int64_t axis = normalizeAxis(n.i("dim"), rank);
  const AxisSplit a = rank == 0 ? AxisSplit{} : splitAt(x.shape(), axis);
  const int64_t columns = a.outer * a.inner;
  if (columns == 0 || a.size == 0) return;
  constexpr int64_t kLongRow = 256, kFewColumns = 2048;
  const bool scan = a.size >= kLongRow && (a.inner == 1 || columns < kFewColumns);
  dispatchAll(x.dtype(), "cumsum", [&](auto tag) {
    using T = decltype(tag);
    auto* dst = static_cast<cumsum_out_t<T>*>(out[0].data);
    const auto* src = static_cast<const T*>(x.data);
    if (scan) {
      const auto blocks = static_cast<unsigned>(std::min<int64_t>(columns, 65535 * 8));
      cumsumScanKernel<T><<<blocks, kThreads, 0, ctx.stream>>>(dst, src, a.size, a.inner, columns);
    } else {
      cumsumColumnsKernel<T>
          <<<gridFor(columns, kThreads), kThreads, 0, ctx.stream>>>(dst, src, a.size, a.inner, columns);
    }
  });
  checkLaunch("cuda.cumsum", ctx.node);
}

/// Inclusive prefix product along `dim`: one thread per column (a product
/// scan would round differently from the CPU's loop).
void cumprodKernelFn(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& x = in[0];
  const auto rank = static_cast<int64_t>(x.shape().size());
  const AxisSplit a = rank == 0 ? AxisSplit{} : splitAt(x.shape(), normalizeAxis(n.i("dim"), rank));
  const int64_t columns = a.outer * a.inner;
  if (columns == 0 || a.size == 0) return;
  dispatchAll(x.dtype(), "cumprod", [&](auto tag) {
    using T = decltype(tag);
    cumsumColumnsKernel<T, true><<<gridFor(columns, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<cumsum_out_t<T>*>(out[0].data), static_cast<const T*>(x.data), a.size, a.inner, columns);
  });
  checkLaunch("cuda.cumprod", ctx.node);
}

// ---- topk --------------------------------------------------------------------------

/// The CPU's order (backend/cpu/kernels_reduction.cpp): NaN above every
/// number, then by value, equal values by the lower index. A strict total
/// order, so every element of a row has its own rank.
template <class C>
__device__ __forceinline__ bool topkBetter(C a, int64_t ia, C b, int64_t ib, bool largest) {
  if constexpr (std::is_floating_point_v<C>) {
    const bool an = isnan(a), bn = isnan(b);
    if (an || bn) return an != bn ? (largest ? an : bn) : ia < ib;
  }
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

/// One thread per element: its rank is the number of elements of its row
/// that beat it, and the element's index lands at that rank when it is
/// below k. O(size) reads per element, which suits the rows topk sees in
/// training graphs (experts, candidates); a full sort of a long row
/// (sort/argsort lower to topk with k = size) is quadratic.
template <class T>
__global__ void __launch_bounds__(kThreads)
    topkRankKernel(int64_t* dst, const T* src, int64_t size, int64_t inner, int64_t k, bool largest, int64_t n) {
  for (int64_t t = firstIndex(); t < n; t += gridStride()) {
    const int64_t col = t / size, j = t % size;
    const int64_t base = (col / inner) * size * inner + col % inner;
    const auto v = ld(src[base + j * inner]);
    int64_t rank = 0;
    for (int64_t i = 0; i < size && rank < k; ++i)
      rank += topkBetter(ld(src[base + i * inner]), i, v, j, largest) ? 1 : 0;
    if (rank < k) dst[(col / inner) * k * inner + col % inner + rank * inner] = j;
  }
}

void topkKernelFn(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& x = in[0];
  const auto rank = static_cast<int64_t>(x.shape().size());
  const int64_t axis = normalizeAxis(n.i("dim"), rank), k = n.i("k");
  const AxisSplit a = rank == 0 ? AxisSplit{} : splitAt(x.shape(), axis);
  const int64_t elements = a.outer * a.size * a.inner;
  if (k == 0 || elements == 0) return;
  dispatchAll(x.dtype(), "topk", [&](auto tag) {
    using T = decltype(tag);
    // Elements ordered column by column: a column's threads share its reads.
    topkRankKernel<T><<<gridFor(elements, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<int64_t*>(out[0].data), static_cast<const T*>(x.data), a.size, a.inner, k, n.i("largest") != 0,
        elements);
  });
  checkLaunch("cuda.topk", ctx.node);
}

}  // namespace

void registerCudaIndexKernels(CudaKernelRegistry& r) {
  r.add(ownCudaKernel("index", indexKernelFn));
  r.add(ownCudaKernel("gather", gatherKernelFn, nullptr, ranksFit));
  r.add(ownCudaKernel("index_add", indexAddKernelFn));
  r.add(ownCudaKernel("scatter_add", scatterAddKernelFn, nullptr, ranksFit));
  r.add(ownCudaKernel("scatter_reduce", scatterReduceKernelFn, nullptr, ranksFit));
  r.add(ownCudaKernel("cumsum", cumsumKernelFn));
  r.add(ownCudaKernel("cumprod", cumprodKernelFn));
  r.add(ownCudaKernel("topk", topkKernelFn));
}

}  // namespace kiln::cuda
